package node

import (
	"bytes"
	"log/slog"
	"testing"
)

// TestRunnerLogAsWith: a runner's logger writes what slog's With of the
// same attributes writes, byte for byte (records, With and WithGroup
// below it, text and JSON), and formats its attributes only once a
// record passes the level.
func TestRunnerLogAsWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(*bytes.Buffer) slog.Handler
	}{
		{"text", func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: noTime})
		}},
		{"json", func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: noTime})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want, got bytes.Buffer
			base := slog.New(tc.h(&want)).With("node", "n1")
			r := &runner{d: &runnerDeps{log: slog.New(tc.h(&got)).With("node", "n1")}, id: "gpud-7-1-n1", allocID: "a7", jobID: 7}
			with := base.With(slog.Uint64("job_id", 7), slog.String("alloc_id", "a7"), slog.String("container", "gpud-7-1-n1"))
			lazy := r.log()
			lazy.Info("not written")
			if h := lazy.Handler().(*lazyAttrs); h.with != nil {
				t.Errorf("a record below the level formatted the attributes")
			}
			for _, l := range []*slog.Logger{with, lazy} {
				l.Warn("job container gone", "err", "x")
				l.With("step", 3).WithGroup("g").Error("step ended", "code", 1)
				l.WithGroup("h").Warn("grouped", "a", 1)
			}
			if got.String() != want.String() {
				t.Errorf("runner log wrote\n%s\nwant (With's)\n%s", got.String(), want.String())
			}
			if r.log() != lazy {
				t.Errorf("a second log() made another logger")
			}
		})
	}
}

func noTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
