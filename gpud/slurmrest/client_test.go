package slurmrest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/slurmrest/slurmclient/v0042"
	"github.com/gpud/gpud/gpud/slurmrest/slurmclient/v0045"
)

// validating is an http.Client transport that validates every request a
// generated client sends and every answer it gets against Slurm's
// document, and carries the user's token as slurmrestd's clients do.
type validating struct {
	t     testing.TB
	base  http.RoundTripper
	token string
}

func (v validating) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	req.Header.Set("X-SLURM-USER-TOKEN", v.token)
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(out))
	if resp.StatusCode != http.StatusUnauthorized {
		validate(v.t, req.Method, req.URL.RequestURI(), body, resp.StatusCode, resp.Header, out)
	}
	return resp, nil
}

func (c *cluster) httpFor(t testing.TB, token string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: validating{t: t, base: c.hc.Transport, token: token}}
}

func ptr[T any](v T) *T { return &v }

// The same flow with the clients of v0.0.45 and v0.0.42, as a user and as
// an operator: submit a job asking gres/gpu:2 per node, list it, change
// its time limit, drain and resume a node (the operator; the user is
// refused), cancel the job and read its accounting record.
func TestGeneratedClientV45(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	for _, who := range []auth.Claims{alice, olga} {
		t.Run(who.User, func(t *testing.T) {
			ctx := context.Background()
			cl, err := v0045.NewClientWithResponses(c.https, v0045.WithHTTPClient(c.httpFor(t, c.token(t, who))))
			if err != nil {
				t.Fatal(err)
			}
			begin := time.Now().Add(time.Hour).Unix()
			sub, err := cl.SlurmV0045PostJobSubmitWithResponse(ctx, v0045.V0045JobSubmitReq{
				Script: ptr("#!/bin/sh\nnvidia-smi -L\n"),
				Job: &v0045.V0045JobDescMsg{
					Name: ptr("train-" + who.User), TresPerNode: ptr("gres/gpu:2"), CurrentWorkingDirectory: ptr("/tmp"),
					Environment: &v0045.V0045StringArray{"PATH=/bin"},
					TimeLimit:   &v0045.V0045Uint32NoValStruct{Set: ptr(true), Number: ptr(int32(30))},
					BeginTime:   &v0045.V0045Uint64NoValStruct{Set: ptr(true), Number: ptr(begin)},
				},
			})
			if err != nil || sub.JSON200 == nil || sub.JSON200.JobId == nil {
				t.Fatalf("submit: %v %d %s", err, sub.StatusCode(), sub.Body)
			}
			id := fmt.Sprint(*sub.JSON200.JobId)

			list, err := cl.SlurmV0045GetJobsWithResponse(ctx, nil)
			if err != nil || list.JSON200 == nil {
				t.Fatalf("list: %v %s", err, list.Body)
			}
			found := false
			for _, j := range list.JSON200.Jobs {
				if fmt.Sprint(*j.JobId) == id {
					found = true
					if j.TresPerNode == nil || *j.TresPerNode != "gres/gpu:2" || (*j.JobState)[0] != "PENDING" || *j.UserName != who.User {
						t.Errorf("listed job %s: tres_per_node %v state %v user %v; want gres/gpu:2, PENDING, %s", id, deref(j.TresPerNode), *j.JobState, deref(j.UserName), who.User)
					}
				}
			}
			if !found {
				t.Fatalf("job %s not listed", id)
			}

			// A user may lower a time limit; an operator may raise it too.
			limit := int32(20)
			if who.Role != "" {
				limit = 90
			}
			upd, err := cl.SlurmV0045PostJobWithResponse(ctx, id, v0045.V0045JobDescMsg{TimeLimit: &v0045.V0045Uint32NoValStruct{Set: ptr(true), Number: ptr(limit)}})
			if err != nil || upd.StatusCode() != 200 {
				t.Fatalf("update time limit: %v %d %s", err, upd.StatusCode(), upd.Body)
			}
			got, err := cl.SlurmV0045GetJobWithResponse(ctx, id, nil)
			if err != nil || got.JSON200 == nil || len(got.JSON200.Jobs) != 1 || *got.JSON200.Jobs[0].TimeLimit.Number != limit {
				t.Fatalf("job after update: %v %s; want time_limit %d", err, got.Body, limit)
			}

			drain, err := cl.SlurmV0045PostNodeWithResponse(ctx, "gpu02", v0045.V0045UpdateNodeMsg{State: &[]v0045.V0045UpdateNodeMsgState{"DRAIN"}, Reason: ptr("swap PSU")})
			if err != nil {
				t.Fatal(err)
			}
			if who.Role == "" {
				if drain.StatusCode() != http.StatusForbidden || !strings.Contains(string(drain.Body), "operator") {
					t.Errorf("user's drain: %d %s; want 403 naming the operator role", drain.StatusCode(), drain.Body)
				}
			} else {
				if drain.StatusCode() != 200 {
					t.Fatalf("drain: %d %s", drain.StatusCode(), drain.Body)
				}
				n, err := cl.SlurmV0045GetNodeWithResponse(ctx, "gpu02", nil)
				if err != nil || n.JSON200 == nil || !contains(*n.JSON200.Nodes[0].State, "DRAIN") || *n.JSON200.Nodes[0].Reason != "swap PSU" {
					t.Fatalf("node after drain: %v %s", err, n.Body)
				}
				res, err := cl.SlurmV0045PostNodeWithResponse(ctx, "gpu02", v0045.V0045UpdateNodeMsg{State: &[]v0045.V0045UpdateNodeMsgState{"RESUME"}})
				if err != nil || res.StatusCode() != 200 {
					t.Fatalf("resume: %v %s", err, res.Body)
				}
				n, err = cl.SlurmV0045GetNodeWithResponse(ctx, "gpu02", nil)
				if err != nil || n.JSON200 == nil || contains(*n.JSON200.Nodes[0].State, "DRAIN") {
					t.Fatalf("node after resume: %v %s", err, n.Body)
				}
			}

			del, err := cl.SlurmV0045DeleteJobWithResponse(ctx, id, nil)
			if err != nil || del.StatusCode() != 200 {
				t.Fatalf("cancel: %v %s", err, del.Body)
			}
			acct := waitAcct(t, func() (int, []byte, bool) {
				r, err := cl.SlurmdbV0045GetJobWithResponse(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				ok := r.JSON200 != nil && len(r.JSON200.Jobs) == 1 && r.JSON200.Jobs[0].State != nil && (*r.JSON200.Jobs[0].State.Current)[0] == "CANCELLED"
				return r.StatusCode(), r.Body, ok
			})
			if !strings.Contains(string(acct), `"user":"`+who.User+`"`) {
				t.Errorf("accounting record: %s; want user %s", acct, who.User)
			}
		})
	}
}

func TestGeneratedClientV42(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	for _, who := range []auth.Claims{alice, olga} {
		t.Run(who.User, func(t *testing.T) {
			ctx := context.Background()
			cl, err := v0042.NewClientWithResponses(c.https, v0042.WithHTTPClient(c.httpFor(t, c.token(t, who))))
			if err != nil {
				t.Fatal(err)
			}
			begin := time.Now().Add(time.Hour).Unix()
			sub, err := cl.SlurmV0042PostJobSubmitWithResponse(ctx, v0042.V0042JobSubmitReq{
				Job: &v0042.V0042JobDescMsg{
					Script: ptr("#!/bin/sh\nnvidia-smi -L\n"),
					Name:   ptr("train-" + who.User), TresPerNode: ptr("gres/gpu:2"), CurrentWorkingDirectory: ptr("/tmp"),
					Environment: &v0042.V0042StringArray{"PATH=/bin"},
					TimeLimit:   &v0042.V0042Uint32NoValStruct{Set: ptr(true), Number: ptr(int32(30))},
					BeginTime:   &v0042.V0042Uint64NoValStruct{Set: ptr(true), Number: ptr(begin)},
				},
			})
			if err != nil || sub.JSON200 == nil || sub.JSON200.JobId == nil {
				t.Fatalf("submit: %v %d %s", err, sub.StatusCode(), sub.Body)
			}
			id := fmt.Sprint(*sub.JSON200.JobId)

			list, err := cl.SlurmV0042GetJobsWithResponse(ctx, nil)
			if err != nil || list.JSON200 == nil {
				t.Fatalf("list: %v %s", err, list.Body)
			}
			found := false
			for _, j := range list.JSON200.Jobs {
				if fmt.Sprint(*j.JobId) == id {
					found = *j.TresPerNode == "gres/gpu:2" && (*j.JobState)[0] == "PENDING"
				}
			}
			if !found {
				t.Fatalf("job %s not listed pending with gres/gpu:2: %s", id, list.Body)
			}

			limit := int32(20)
			if who.Role != "" {
				limit = 90
			}
			upd, err := cl.SlurmV0042PostJobWithResponse(ctx, id, v0042.V0042JobDescMsg{TimeLimit: &v0042.V0042Uint32NoValStruct{Set: ptr(true), Number: ptr(limit)}})
			if err != nil || upd.StatusCode() != 200 {
				t.Fatalf("update time limit: %v %d %s", err, upd.StatusCode(), upd.Body)
			}
			got, err := cl.SlurmV0042GetJobWithResponse(ctx, id, nil)
			if err != nil || got.JSON200 == nil || len(got.JSON200.Jobs) != 1 || *got.JSON200.Jobs[0].TimeLimit.Number != limit {
				t.Fatalf("job after update: %v %s; want time_limit %d", err, got.Body, limit)
			}

			drain, err := cl.SlurmV0042PostNodeWithResponse(ctx, "gpu02", v0042.V0042UpdateNodeMsg{State: &v0042.V0042NodeStates{"DRAIN"}, Reason: ptr("swap PSU")})
			if err != nil {
				t.Fatal(err)
			}
			if who.Role == "" {
				if drain.StatusCode() != http.StatusForbidden {
					t.Errorf("user's drain: %d %s; want 403", drain.StatusCode(), drain.Body)
				}
			} else {
				if drain.StatusCode() != 200 {
					t.Fatalf("drain: %d %s", drain.StatusCode(), drain.Body)
				}
				res, err := cl.SlurmV0042PostNodeWithResponse(ctx, "gpu02", v0042.V0042UpdateNodeMsg{State: &v0042.V0042NodeStates{"RESUME"}})
				if err != nil || res.StatusCode() != 200 {
					t.Fatalf("resume: %v %s", err, res.Body)
				}
			}

			del, err := cl.SlurmV0042DeleteJobWithResponse(ctx, id, nil)
			if err != nil || del.StatusCode() != 200 {
				t.Fatalf("cancel: %v %s", err, del.Body)
			}
			waitAcct(t, func() (int, []byte, bool) {
				r, err := cl.SlurmdbV0042GetJobWithResponse(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				ok := r.JSON200 != nil && len(r.JSON200.Jobs) == 1 && (*r.JSON200.Jobs[0].State.Current)[0] == "CANCELLED"
				return r.StatusCode(), r.Body, ok
			})
		})
	}
}

// waitAcct polls an accounting read until ok (the record is written as
// the job ends, a moment after the cancel answers).
func waitAcct(t *testing.T, read func() (int, []byte, bool)) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, ok := read()
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("accounting record: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func contains[T comparable](l []T, v T) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}
