package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/controller"
)

// runIdleHook runs a partition's or QOS's idle_hook for one idle job: the
// program with its configured arguments, then the job id, user and reason,
// which are also in GPUD_JOB_ID, GPUD_JOB_USER, GPUD_JOB_ACCOUNT and
// GPUD_IDLE_REASON. ctx carries the controller's timeout; a hook that
// outlives it is killed. Its output is only reported when it fails.
func runIdleHook(ctx context.Context, ev controller.IdleEvent) error {
	if len(ev.Hook) == 0 {
		return nil
	}
	id := strconv.FormatUint(uint64(ev.JobID), 10)
	args := append(append([]string{}, ev.Hook[1:]...), id, ev.User, ev.Reason)
	cmd := exec.CommandContext(ctx, ev.Hook[0], args...)
	cmd.Env = append(os.Environ(), "GPUD_JOB_ID="+id, "GPUD_JOB_USER="+ev.User, "GPUD_JOB_ACCOUNT="+ev.Account,
		"GPUD_IDLE_REASON="+ev.Reason)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A hook that leaves a child holding its output must not hang us.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 512 {
			msg = msg[:512] + "..."
		}
		return fmt.Errorf("idle_hook %s for job %s: %w (output: %q)", ev.Hook[0], id, err, msg)
	}
	return nil
}
