package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestOneShotClient: a OneShot client over a unix socket sends the
// request with its headers and body, decodes the answer and the
// controller's errors as the pooled client does, closes each connection
// once its answer is read, and gives up on a slow answer when the
// context ends.
func TestOneShotClient(t *testing.T) {
	dir, err := os.MkdirTemp("", "oneshot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var closed, opened atomic.Int64
	var gotKey atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		gotKey.Store(r.Header.Get(api.HeaderIdempotencyKey))
		var req api.SubmitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job.Name != "j" {
			writeJSON(w, http.StatusBadRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInvalid, Message: "bad body"}})
			return
		}
		writeJSON(w, http.StatusOK, api.SubmitResponse{ID: 7, IDs: []spec.JobID{7}})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "8" {
			writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeNotFound, Message: "job 8 not found"}})
			return
		}
		<-r.Context().Done() // a slow answer
	})
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c, err := api.NewClientWith("unix://"+sock, api.ClientOptions{OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		resp, err := c.Submit(ctx, api.SubmitRequest{Job: spec.JobSpec{Name: "j"}, IdempotencyKey: "k1"})
		if err != nil || resp.ID != 7 {
			t.Fatalf("submit: %+v %v; want job 7", resp, err)
		}
	}
	if k, _ := gotKey.Load().(string); k != "k1" {
		t.Errorf("Idempotency-Key %q reached the server, want k1", k)
	}
	if _, err := c.Job(ctx, 8); !errors.Is(err, spec.ErrNotFound) || err.Error() != "job 8 not found" {
		t.Errorf("missing job: %v; want the controller's not-found error", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if o, c := opened.Load(), closed.Load(); o != 4 || c != 4 {
		t.Errorf("%d connections opened, %d closed; want 4 and 4 (one per call, closed after it)", o, c)
	}

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Job(short, 9); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow answer: %v; want the context's deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %v, want about 100ms", d)
	}
}
