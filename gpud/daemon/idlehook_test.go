package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/controller"
)

func TestRunIdleHook(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	hook := filepath.Join(dir, "hook")
	script := "#!/bin/sh\necho \"$@|$GPUD_JOB_ID|$GPUD_JOB_USER|$GPUD_JOB_ACCOUNT|$GPUD_IDLE_REASON\" > \"$1\"\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ev := controller.IdleEvent{Hook: []string{hook, out}, JobID: 42, User: "alice", Account: "lab", Reason: "idle GPUs: below 5% for 30 min"}
	if err := runIdleHook(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := out + " 42 alice idle GPUs: below 5% for 30 min|42|alice|lab|idle GPUs: below 5% for 30 min\n"
	if string(got) != want {
		t.Errorf("hook saw %q, want %q", got, want)
	}

	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho no mail server >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := runIdleHook(context.Background(), ev); err == nil || !strings.Contains(err.Error(), "no mail server") {
		t.Errorf("failing hook: err = %v; want its exit and output", err)
	}

	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := runIdleHook(ctx, ev); err == nil {
		t.Error("a hook past its timeout did not fail")
	}
}
