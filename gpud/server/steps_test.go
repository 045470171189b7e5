package server_test

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/spec"
)

// TestStepTicket: a running job's step tickets go, through POST
// /v1/jobs/{id}/step-ticket, to its owner and root only, with the nodes'
// step addresses (registered step port on the node's address) and the
// CA; each is signed, bound to the credential that obtained it and
// short-lived, and the nodes get only the key to verify them with.
// Another user, a node token and a job that does not run get none.
func TestStepTicket(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef-step")
	s := secureServer(t, server.WithStepTickets(key, []byte("CA PEM")))
	ctx := ctxT(t)
	root := client(t, s.unix)
	inv := inventory("n1", 2)
	inv.StepPort = 6818
	if _, err := root.Register(ctx, inv); err != nil {
		t.Fatal(err)
	}
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))
	n1 := s.client(t, s.token(t, auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, time.Hour))

	js := jobSpec("alloc")
	js.Interactive = true
	sub, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	a := waitAssignment(t, root, "n1", func(a api.Assignment) bool { return a.Job.ID == sub.ID })
	if !a.Job.Interactive {
		t.Errorf("assignment: interactive %v; want true", a.Job.Interactive)
	}
	// The node gets the key tickets are verified with, not a ticket.
	res, err := root.PollAssignments(ctx, "n1", api.AssignmentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewStepTicketSigner(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StepTicketKey != signer.PublicKey() {
		t.Errorf("assignments answer's step ticket key %q; want the signer's %q", res.StepTicketKey, signer.PublicKey())
	}
	for name, c := range map[string]*api.Client{"alice": alice, "root": root} {
		tk, err := c.StepTicket(ctx, sub.ID)
		if err != nil || tk.Alloc != a.Alloc.ID || tk.CA != "CA PEM" ||
			len(tk.Nodes) != 1 || tk.Nodes[0] != (api.StepNode{Name: "n1", StepAddr: "10.0.0.1:6818"}) {
			t.Fatalf("%s's step ticket: %+v, %v; want a ticket for n1 at 10.0.0.1:6818 with the CA", name, tk, err)
		}
		claims, err := auth.VerifyStepTicket(res.StepTicketKey, tk.Ticket, a.Alloc.ID, time.Now())
		if err != nil {
			t.Fatalf("%s's step ticket does not verify with the nodes' key: %v", name, err)
		}
		// Bound to the credential that obtained it: alice's token, root's
		// uid on the socket.
		if name == "root" && claims.Holder != auth.UIDCredential(0) || name == "alice" && claims.Holder.Kind != auth.CredToken ||
			claims.Job != uint64(sub.ID) || time.Unix(claims.Expires, 0).Sub(time.Unix(claims.IssuedAt, 0)) != auth.StepTicketTTL {
			t.Errorf("%s's step ticket says %+v; want it bound to %s's credential, job %d, for %v", name, claims, name, sub.ID, auth.StepTicketTTL)
		}
	}
	_, err = bob.StepTicket(ctx, sub.ID)
	wantStatus(t, "bob asks for alice's ticket", err, 403, spec.ErrPermissionDenied, "only its owner or root may start steps")
	_, err = n1.StepTicket(ctx, sub.ID)
	wantStatus(t, "a node token asks for a ticket", err, 403, spec.ErrPermissionDenied, "node protocol")

	// Held, so it never runs: no ticket, and why.
	js.Hold = true
	held, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.StepTicket(ctx, held.ID)
	wantStatus(t, "a job that does not run", err, 409, spec.ErrConflict, "not running")
}

// TestCompleteAllocation: srun and salloc end the allocation they made
// with their work's exit status (POST /v1/jobs/{id}/complete), so it ends
// COMPLETED or FAILED with that code as Slurm's do, not CANCELLED; its
// node is told to stop it. Only the owner (or root) may, and only an
// interactive allocation: a batch job is refused, saying to use scancel.
func TestCompleteAllocation(t *testing.T) {
	s := secureServer(t)
	ctx := ctxT(t)
	root := client(t, s.unix)
	if _, err := root.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))

	js := jobSpec("alloc")
	js.Interactive = true
	ok, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	waitAssignment(t, root, "n1", func(a api.Assignment) bool { return a.Job.ID == ok.ID })
	_, err = bob.JobAction(ctx, ok.ID, "complete", api.JobActionRequest{})
	wantStatus(t, "bob completes alice's allocation", err, 403, spec.ErrPermissionDenied, "belongs to alice")
	j, err := alice.JobAction(ctx, ok.ID, "complete", api.JobActionRequest{})
	if err != nil || j.State != spec.StateCompleted || j.ExitCode != 0 {
		t.Fatalf("complete with exit 0: %s exit %d, %v; want COMPLETED 0", j.State, j.ExitCode, err)
	}
	a := waitAssignment(t, root, "n1", func(a api.Assignment) bool { return a.Job.ID == ok.ID && a.Stop })
	if a.StopState == "" {
		t.Errorf("the node was told to stop the completed allocation without a state: %+v", a)
	}
	_, err = alice.JobAction(ctx, ok.ID, "complete", api.JobActionRequest{})
	wantStatus(t, "complete twice", err, 409, spec.ErrConflict, "already ended")

	failed, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	waitAssignment(t, root, "n1", func(a api.Assignment) bool { return a.Job.ID == failed.ID })
	j, err = alice.JobAction(ctx, failed.ID, "complete", api.JobActionRequest{ExitCode: 3})
	if err != nil || j.State != spec.StateFailed || j.ExitCode != 3 {
		t.Errorf("complete with exit 3: %s exit %d, %v; want FAILED 3", j.State, j.ExitCode, err)
	}

	batch, err := alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("batch")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.JobAction(ctx, batch.ID, "complete", api.JobActionRequest{})
	wantStatus(t, "complete a batch job", err, 400, spec.ErrInvalid, "scancel")

	js.Hold = true
	held, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.JobAction(ctx, held.ID, "complete", api.JobActionRequest{ExitCode: 300})
	wantStatus(t, "exit code 300", err, 400, spec.ErrInvalid, "0-255")
	if j, err = alice.JobAction(ctx, held.ID, "complete", api.JobActionRequest{}); err != nil || j.State != spec.StateCancelled {
		t.Errorf("complete a pending allocation: %s, %v; want CANCELLED", j.State, err)
	}
}
