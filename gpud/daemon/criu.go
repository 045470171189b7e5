package daemon

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"time"
)

// detectCRIU says whether this host can checkpoint processes with CRIU:
// "ok" when `criu check` passes, else why not, for the node's inventory
// (the controller refuses --checkpoint-mode=criu where no node can).
func detectCRIU(ctx context.Context) string {
	path, err := exec.LookPath("criu")
	if err != nil {
		return "criu is not installed (not found on PATH)"
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err == nil {
		return "ok"
	}
	// criu prints the cause last ("Could not initialize kernel features
	// detection.").
	msg := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || msg == "" {
		msg = err.Error()
	}
	return "criu check failed: " + msg
}
