package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Client talks to a gpud controller. It is safe for concurrent use.
type Client struct {
	base string
	// addr is the address as configured (for messages).
	addr string
	hc   *http.Client
	// Token, when set, is sent as a bearer token; only over https (a unix
	// socket identifies the caller by peer credentials, and plain http
	// would leak it).
	Token string
	tls   bool
}

// Environment variables and files for remote (https://) controllers.
const (
	// EnvCA names a PEM file of the CA that signed the controller's
	// certificate (the controller's <state_dir>/tls/ca.pem).
	EnvCA = "GPUD_CA"
	// EnvToken holds a bearer token from `gpud token issue`.
	EnvToken = "GPUD_TOKEN"
)

// ClientOptions are the TLS and token settings for https:// addresses;
// zero fields fall back to the environment and the user's config dir.
type ClientOptions struct {
	// CAFile is the CA to trust (else $GPUD_CA, else
	// ~/.config/gpud/ca.pem if it exists, else the system roots).
	CAFile string
	// Token is the bearer token (else $GPUD_TOKEN, else TokenFile).
	Token string
	// TokenFile holds the token (else ~/.config/gpud/token if it exists).
	// The file must not be readable by group or others; the token is its
	// first line that is neither empty nor a # comment.
	TokenFile string
	// CertFile and KeyFile are a client certificate to present (a node
	// agent's, from joining); a connection with one needs no token.
	CertFile, KeyFile string
	// FailoverTimeout bounds the retries of one call over a list of
	// controllers (0: DefaultFailoverTimeout); see failover.go.
	FailoverTimeout time.Duration
	// DialTimeout and HandshakeTimeout bound one connection attempt (0:
	// DefaultDialTimeout, DefaultHandshakeTimeout); PingAfter and
	// PingTimeout find a dead HTTP/2 connection (0: DefaultPingAfter,
	// DefaultPingTimeout). See transport.go.
	DialTimeout, HandshakeTimeout time.Duration
	PingAfter, PingTimeout        time.Duration
	// OneShot, for a unix:// address, sends each request on a
	// connection of its own, dialled, written and read on the caller's
	// goroutine (oneShot in transport.go): for a process that makes a
	// call or two and exits, such as sbatch.
	OneShot bool
}

// NewClient returns a client for addr: "unix:///path/to/gpud.sock" (the
// caller is its uid), "https://host:port" (TLS with a bearer token; see
// ClientOptions for where the CA and token come from) or, for tests only,
// "http://" to a loopback address. A comma-separated list of such
// addresses is a controller group whose leader the client follows
// (failover.go).
func NewClient(addr string) (*Client, error) { return NewClientWith(addr, ClientOptions{}) }

// NewClientWith is NewClient with explicit TLS and token settings.
func NewClientWith(addr string, o ClientOptions) (*Client, error) {
	switch addrs := SplitControllers(addr); len(addrs) {
	case 0:
		addr = ""
	case 1:
		addr = addrs[0]
	default:
		return newGroupClient(addrs, o)
	}
	if addr == "" {
		return nil, spec.Errorf(spec.ErrInvalid, "no controller address; pass --controller or set %s (e.g. unix:///var/lib/gpud/gpud.sock)", EnvController)
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInvalid, "controller address %q: %v", addr, err)
	}
	tr := newTransport(o)
	c := &Client{hc: &http.Client{Transport: tr}, addr: addr}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		if path == "" {
			return nil, spec.Errorf(spec.ErrInvalid, "controller address %q has no socket path (want unix:///path/gpud.sock)", addr)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		if o.OneShot {
			c.hc.Transport = oneShot{dial: tr.DialContext}
		}
		c.base = "http://gpud"
	case "http":
		// The controller serves TCP with TLS only; plain http reaches
		// only test servers on this machine.
		if !loopback(u.Hostname()) {
			return nil, spec.Errorf(spec.ErrInvalid, "controller address %q: plain http is allowed only to a loopback address (tests); use https://%s", addr, u.Host)
		}
		c.base = "http://" + u.Host
	case "https":
		cfg, err := clientTLS(o)
		if err != nil {
			return nil, err
		}
		if o.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			if err != nil {
				return nil, spec.Errorf(spec.ErrInvalid, "load client certificate %s: %v", o.CertFile, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
		c.base = "https://" + u.Host
		c.tls = true
		if c.Token, err = clientToken(o); err != nil {
			return nil, err
		}
	default:
		return nil, spec.Errorf(spec.ErrInvalid, "controller address %q: scheme %q not supported (use unix:// or https://)", addr, u.Scheme)
	}
	return c, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// userFile returns ~/.config/gpud/name ($XDG_CONFIG_HOME respected), or
// "" when there is no config dir.
func userFile(name string) string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "gpud", name)
}

func clientTLS(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	path := o.CAFile
	if path == "" {
		path = os.Getenv(EnvCA)
	}
	if path == "" {
		path = userFile("ca.pem")
		if _, err := os.Stat(path); path == "" || err != nil {
			return cfg, nil // system roots: a site certificate
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInvalid, "read the controller's CA certificate %s: %v; copy the controller's <state_dir>/tls/ca.pem there or set %s", path, err, EnvCA)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, spec.Errorf(spec.ErrInvalid, "CA file %s has no PEM certificate; use the controller's <state_dir>/tls/ca.pem", path)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

func clientToken(o ClientOptions) (string, error) {
	if o.Token != "" {
		return strings.TrimSpace(o.Token), nil
	}
	if t := os.Getenv(EnvToken); t != "" {
		return strings.TrimSpace(t), nil
	}
	path := o.TokenFile
	if path == "" {
		path = userFile("token")
		if _, err := os.Stat(path); path == "" || err != nil {
			return "", nil // the server says how to get one
		}
	}
	return ReadTokenFile(path)
}

// ReadTokenFile reads a token file: the first line that is neither empty
// nor a # comment. A file that group or others may read is refused, as
// ssh refuses such a key.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", spec.Errorf(spec.ErrInvalid, "read token file: %v; save the output of `gpud token issue` there or set %s", err, EnvToken)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", spec.Errorf(spec.ErrInvalid, "token file %s is mode %#o: others may read your token; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", spec.Errorf(spec.ErrInvalid, "read token file: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", spec.Errorf(spec.ErrInvalid, "token file %s holds no token; save the output of `gpud token issue` there", path)
}

// HTTPClient exposes the underlying client so callers can set TLS options.
func (c *Client) HTTPClient() *http.Client { return c.hc }

// KindCode maps an error to its wire code and HTTP status.
func KindCode(err error) (code string, status int) {
	switch {
	case errors.Is(err, spec.ErrNotFound):
		return CodeNotFound, http.StatusNotFound
	case errors.Is(err, spec.ErrInvalid):
		return CodeInvalid, http.StatusBadRequest
	case errors.Is(err, spec.ErrConflict):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, spec.ErrUnavailable):
		return CodeUnavailable, http.StatusServiceUnavailable
	case errors.Is(err, spec.ErrPermissionDenied):
		return CodePermissionDenied, http.StatusForbidden
	case errors.Is(err, spec.ErrRefused):
		return CodeRefused, http.StatusUnprocessableEntity
	case errors.Is(err, spec.ErrNotLeader):
		return CodeNotLeader, http.StatusMisdirectedRequest
	}
	return CodeInternal, http.StatusInternalServerError
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.doWith(ctx, method, path, q, nil, in, out)
}

// doWith is do with extra request headers.
func (c *Client) doWith(ctx context.Context, method, path string, q url.Values, hdr http.Header, in, out any) error {
	resp, err := c.send(ctx, method, path, q, hdr, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if u, ok := out.(json.Unmarshaler); ok {
		// Large bodies (job lists) decode in one pass over one buffer,
		// sized from Content-Length, with the type's own fast decoder.
		b, err := readBody(resp)
		if err == nil {
			err = u.UnmarshalJSON(b)
		}
		if err != nil {
			return fmt.Errorf("decode %s %s response: %w", method, path, err)
		}
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return nil
}

// send sends a call and returns its successful response, whose body the
// caller reads and closes; a failed call's answer is its error.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, hdr http.Header, in any) (*http.Response, error) {
	var body io.Reader
	if enc, ok := in.(encoded); ok {
		body = bytes.NewReader(enc)
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + "/" + Version + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" && c.tls {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = c.groupErr(err)
		return nil, spec.Errorf(spec.ErrUnavailable, "cannot reach the gpud controller: %v; is it running, and is %s right?", err, EnvController)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var eb ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = fmt.Sprintf("controller answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		if eb.Error.Code == CodeNotLeader {
			eb.Error.Message = c.notLeaderMessage(eb.Error.Message, resp.Header.Get(HeaderLeader))
		}
		return nil, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return resp, nil
}

// maxPresize caps the buffer readBody allocates up front on the server's
// word; a longer body still reads, growing as it comes.
const maxPresize = 1 << 30

func readBody(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > maxPresize {
		return io.ReadAll(resp.Body)
	}
	// One byte spare so the read that sees EOF needs no growth.
	buf := make([]byte, 0, n+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		switch {
		case errors.Is(err, io.EOF):
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// Submit submits a job (or, with TestOnly, asks when it would start).
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	var out SubmitResponse
	var hdr http.Header
	if req.IdempotencyKey != "" && !req.TestOnly {
		hdr = http.Header{HeaderIdempotencyKey: {req.IdempotencyKey}}
	}
	err := c.doWith(ctx, http.MethodPost, "/jobs", nil, hdr, req, &out)
	return out, err
}

// Jobs lists jobs matching f.
func (c *Client) Jobs(ctx context.Context, f JobFilter) ([]spec.Job, error) {
	q := url.Values{}
	for _, id := range f.IDs {
		q.Add("id", strconv.FormatUint(uint64(id), 10))
	}
	for _, u := range f.Users {
		q.Add("user", u)
	}
	for _, a := range f.Accounts {
		q.Add("account", a)
	}
	for _, p := range f.Partitions {
		q.Add("partition", p)
	}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	if f.All {
		q.Set("all", "1")
	}
	if f.View != ViewFull {
		q.Set("view", f.View)
	}
	var out JobsResponse
	err := c.do(ctx, http.MethodGet, "/jobs", q, nil, &out)
	return out.Jobs, err
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id spec.JobID) (spec.Job, error) {
	return c.JobByRef(ctx, spec.JobRef{ID: id})
}

// JobByRef fetches a job or an array task ("42_7").
func (c *Client) JobByRef(ctx context.Context, ref spec.JobRef) (spec.Job, error) {
	var out spec.Job
	err := c.do(ctx, http.MethodGet, "/jobs/"+ref.String(), nil, nil, &out)
	return out, err
}

// WaitJob blocks until job id reaches a terminal state or ctx ends. It
// long-polls so a controller restart in between only costs a retry.
func (c *Client) WaitJob(ctx context.Context, id spec.JobID) (spec.Job, error) {
	for {
		var out spec.Job
		q := url.Values{"timeout": {"30"}}
		err := c.do(withCall(ctx, callOpts{patience: 30 * time.Second}), http.MethodGet, "/jobs/"+strconv.FormatUint(uint64(id), 10)+"/wait", q, nil, &out)
		switch {
		case err == nil && out.State.Terminal():
			return out, nil
		case err == nil:
			continue
		case errors.Is(err, spec.ErrUnavailable) && ctx.Err() == nil:
			// The controller may be restarting; the job is durable, so wait.
			select {
			case <-ctx.Done():
				return spec.Job{}, ctx.Err()
			case <-time.After(time.Second):
			}
		default:
			return out, err
		}
	}
}

// JobAction performs cancel, hold, release or requeue on a job.
func (c *Client) JobAction(ctx context.Context, id spec.JobID, action string, req JobActionRequest) (spec.Job, error) {
	return c.RefAction(ctx, spec.JobRef{ID: id}, action, req)
}

// RefAction is JobAction on "42" (a whole array when 42 is one) or on one
// array task "42_7".
func (c *Client) RefAction(ctx context.Context, ref spec.JobRef, action string, req JobActionRequest) (spec.Job, error) {
	var out spec.Job
	err := c.do(ctx, http.MethodPost, "/jobs/"+ref.String()+"/"+action, nil, req, &out)
	return out, err
}

// CancelJobs cancels every job req's filter matches, in one call.
func (c *Client) CancelJobs(ctx context.Context, req CancelJobsRequest) (CancelJobsResponse, error) {
	var out CancelJobsResponse
	err := c.do(ctx, http.MethodPost, "/jobs/cancel", nil, req, &out)
	return out, err
}

// UpdateJob changes a job (scontrol update JobId=N ...).
func (c *Client) UpdateJob(ctx context.Context, ref spec.JobRef, req JobUpdateRequest) (spec.Job, error) {
	var out spec.Job
	err := c.do(ctx, http.MethodPatch, "/jobs/"+ref.String(), nil, req, &out)
	return out, err
}

// Associations returns the accounts, users and QOS (sacctmgr list).
func (c *Client) Associations(ctx context.Context) (AssociationsResponse, error) {
	var out AssociationsResponse
	err := c.do(ctx, http.MethodGet, "/associations", nil, nil, &out)
	return out, err
}

// Partitions lists the partitions, in configuration order.
func (c *Client) Partitions(ctx context.Context) ([]Partition, error) {
	var out PartitionsResponse
	err := c.do(ctx, http.MethodGet, "/partitions", nil, nil, &out)
	return out.Partitions, err
}

// Nodes lists nodes.
func (c *Client) Nodes(ctx context.Context) ([]spec.Node, error) {
	var out NodesResponse
	err := c.do(ctx, http.MethodGet, "/nodes", nil, nil, &out)
	return out.Nodes, err
}

// Priorities lists every pending job's priority and its factors (gpuq
// prio), highest first.
func (c *Client) Priorities(ctx context.Context) ([]JobPriority, error) {
	var out PrioritiesResponse
	err := c.do(ctx, http.MethodGet, "/priorities", nil, nil, &out)
	return out.Jobs, err
}

// Fairshare returns the fairshare tree with shares, usage and factors
// (gpuq share).
func (c *Client) Fairshare(ctx context.Context) ([]FairshareRow, error) {
	var out FairshareResponse
	err := c.do(ctx, http.MethodGet, "/fairshare", nil, nil, &out)
	return out.Rows, err
}

// NodeAction drains or resumes a node.
func (c *Client) NodeAction(ctx context.Context, name, action string, req NodeActionRequest) (spec.Node, error) {
	var out spec.Node
	err := c.do(ctx, http.MethodPost, "/nodes/"+url.PathEscape(name)+"/"+action, nil, req, &out)
	return out, err
}

// UpdateNodes changes nodes as scontrol update NodeName= does, all or
// nothing; it returns the live differences from what the nodes registered.
func (c *Client) UpdateNodes(ctx context.Context, u spec.NodeUpdate) (AdminUpdateResponse, error) {
	var out AdminUpdateResponse
	err := c.do(ctx, http.MethodPatch, "/nodes", nil, u, &out)
	return out, err
}

// UpdatePartition changes a partition as scontrol update PartitionName=
// does; it returns every live difference from the configuration file.
func (c *Client) UpdatePartition(ctx context.Context, u spec.PartitionUpdate) (AdminUpdateResponse, error) {
	var out AdminUpdateResponse
	err := c.do(ctx, http.MethodPatch, "/partitions/"+url.PathEscape(u.Name), nil, u, &out)
	return out, err
}

// Reconfigure asks the controller to reload its configuration file.
func (c *Client) Reconfigure(ctx context.Context) (ReconfigureResponse, error) {
	var out ReconfigureResponse
	err := c.do(ctx, http.MethodPost, "/reconfigure", nil, struct{}{}, &out)
	return out, err
}

// UserToken asks for a token for the caller itself (scontrol token), valid
// for lifespan (0: 30 minutes).
func (c *Client) UserToken(ctx context.Context, lifespan time.Duration) (TokenResponse, error) {
	var out TokenResponse
	err := c.do(ctx, http.MethodPost, "/token", nil, TokenRequest{Lifespan: int64(lifespan / time.Second)}, &out)
	return out, err
}

// Register registers (or re-registers) a node's inventory.
func (c *Client) Register(ctx context.Context, inv spec.Inventory) (RegisterResponse, error) {
	return c.RegisterNode(ctx, RegisterRequest{Inventory: inv})
}

// Join asks for a node certificate with the cluster's join token (see
// JoinRequest). Over https only.
func (c *Client) Join(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	var out JoinResponse
	// The token in a header is checked before the body is read.
	err := c.doWith(ctx, http.MethodPost, "/nodes/join", nil, http.Header{JoinTokenHeader: {req.JoinToken}}, req, &out)
	return out, err
}

// Heartbeat tells the controller the node is alive and what it runs.
func (c *Client) Heartbeat(ctx context.Context, node string, running []string) error {
	return c.SendHeartbeat(ctx, node, HeartbeatRequest{Running: running})
}

// SendHeartbeat is Heartbeat with the whole request (GPU health too).
func (c *Client) SendHeartbeat(ctx context.Context, node string, req HeartbeatRequest) error {
	return c.do(withCall(ctx, callOpts{resend: true}), http.MethodPost, "/nodes/"+url.PathEscape(node)+"/heartbeat", nil, req, nil)
}

// Assignments long-polls for the node's desired allocations newer than
// generation after, waiting at most wait.
func (c *Client) Assignments(ctx context.Context, node string, after uint64, wait time.Duration) (AssignmentsResponse, error) {
	return c.PollAssignments(ctx, node, AssignmentsRequest{After: after, Wait: wait})
}

// Events delivers allocation events from a node's outbox.
func (c *Client) Events(ctx context.Context, node string, events []AllocEvent) (EventsResponse, error) {
	return c.EventsAt(ctx, node, events, time.Time{})
}

// EventsAt is Events saying the node's clock as it sends them (the
// events' times are on it; EventsRequest.Now).
func (c *Client) EventsAt(ctx context.Context, node string, events []AllocEvent, now time.Time) (EventsResponse, error) {
	return c.EventsFor(ctx, node, events, now, "")
}

// EventsFor is EventsAt saying the identity of the controller the events
// were recorded for (EventsRequest.ControllerID; "": not said).
func (c *Client) EventsFor(ctx context.Context, node string, events []AllocEvent, now time.Time, controllerID string) (EventsResponse, error) {
	var out EventsResponse
	req := EventsRequest{Events: events, Now: now, ControllerID: controllerID}
	var in any = req
	if b, ok := req.appendJSON(make([]byte, 0, 64+384*len(events))); ok { // eventsencode.go: no reflection
		in = encoded(b)
	}
	// The controller applies events idempotently by seq.
	err := c.do(withCall(ctx, callOpts{resend: true}), http.MethodPost, "/nodes/"+url.PathEscape(node)+"/events", nil, in, &out)
	return out, err
}

// reportPatience is how much longer than the failover budget an
// accounting or audit report over a controller group may take: a report
// over years of jobs does real work before it answers.
const reportPatience = 2 * time.Minute

// AcctJobs lists jobs from accounting (sacct): GET
// /v1/accounting/jobs?id=&user=&account=&partition=&state=&start=&end=&limit=&attempt_history=&steps=&fields=,
// times in RFC 3339.
func (c *Client) AcctJobs(ctx context.Context, f AcctFilter) ([]AcctJob, error) {
	q := url.Values{}
	for _, id := range f.IDs {
		q.Add("id", strconv.FormatUint(uint64(id), 10))
	}
	for _, u := range f.Users {
		q.Add("user", u)
	}
	for _, a := range f.Accounts {
		q.Add("account", a)
	}
	for _, p := range f.Partitions {
		q.Add("partition", p)
	}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	if !f.Start.IsZero() {
		q.Set("start", f.Start.Format(time.RFC3339))
	}
	if !f.End.IsZero() {
		q.Set("end", f.End.Format(time.RFC3339))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Steps {
		q.Set("steps", "true")
	}
	if f.AttemptHistory {
		q.Set("attempt_history", "true")
	}
	if len(f.Fields) > 0 {
		q.Set("fields", strings.Join(f.Fields, ","))
	}
	var out AcctJobsResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/accounting/jobs", q, nil, &out)
	return out.Jobs, err
}

// AcctSummary totals accounted usage by group (one of the GroupBy
// constants) for the jobs f selects (sreport): GET
// /v1/accounting/summary?group=&user=&account=&partition=&start=&end=.
// f.IDs, f.States and f.Limit are not sent.
func (c *Client) AcctSummary(ctx context.Context, group string, f AcctFilter) (AcctSummaryResponse, error) {
	q := url.Values{"group": {group}}
	for _, u := range f.Users {
		q.Add("user", u)
	}
	for _, a := range f.Accounts {
		q.Add("account", a)
	}
	for _, p := range f.Partitions {
		q.Add("partition", p)
	}
	if !f.Start.IsZero() {
		q.Set("start", f.Start.Format(time.RFC3339))
	}
	if !f.End.IsZero() {
		q.Set("end", f.End.Format(time.RFC3339))
	}
	var out AcctSummaryResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/accounting/summary", q, nil, &out)
	return out, err
}

// AcctCluster reports the cluster's allocated, idle and down GPU-hours by
// GPU model and MIG profile over [start, end], with a series in buckets
// of bucket (0: the server's choice): GET
// /v1/accounting/cluster?start=&end=&bucket=.
func (c *Client) AcctCluster(ctx context.Context, start, end time.Time, bucket time.Duration) (AcctClusterResponse, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.Format(time.RFC3339))
	}
	if !end.IsZero() {
		q.Set("end", end.Format(time.RFC3339))
	}
	if bucket > 0 {
		q.Set("bucket", strconv.FormatInt(int64(bucket/time.Second), 10))
	}
	var out AcctClusterResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/accounting/cluster", q, nil, &out)
	return out, err
}

// AcctReservations reports the reservation windows that held at any
// time in [start, end] (sreport reservation utilization), of the
// reservations in names (all when empty): GET
// /v1/accounting/reservations?start=&end=&names=.
func (c *Client) AcctReservations(ctx context.Context, start, end time.Time, names []string) (AcctResvResponse, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.Format(time.RFC3339))
	}
	if !end.IsZero() {
		q.Set("end", end.Format(time.RFC3339))
	}
	if len(names) > 0 {
		q.Set("names", strings.Join(names, ","))
	}
	var out AcctResvResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/accounting/reservations", q, nil, &out)
	return out, err
}

// LatestUsage lists the newest usage sample of each job on each node
// from the last few minutes (gpuq top): GET /v1/usage/latest.
func (c *Client) LatestUsage(ctx context.Context) ([]LatestUsage, error) {
	var out LatestUsageResponse
	err := c.do(ctx, http.MethodGet, "/usage/latest", nil, nil, &out)
	return out.Samples, err
}

// Audit lists the audit log entries f selects, oldest first (operator or
// admin only).
func (c *Client) Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	q := url.Values{}
	if !f.Start.IsZero() {
		q.Set("start", f.Start.Format(time.RFC3339))
	}
	if !f.End.IsZero() {
		q.Set("end", f.End.Format(time.RFC3339))
	}
	if f.Actor != "" {
		q.Set("actor", f.Actor)
	}
	if f.Action != "" {
		q.Set("action", f.Action)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out AuditResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/audit", q, nil, &out)
	return out.Entries, err
}

// GPUEventQuery selects GPU health events (GET /v1/health/*); zero
// fields select all.
type GPUEventQuery struct {
	Start, End                            time.Time
	Nodes, Serials, UUIDs, Kinds, Classes []string
	// Limit keeps the newest Limit events (0: all).
	Limit int
}

func (f GPUEventQuery) values() url.Values {
	q := url.Values{}
	if !f.Start.IsZero() {
		q.Set("start", f.Start.Format(time.RFC3339))
	}
	if !f.End.IsZero() {
		q.Set("end", f.End.Format(time.RFC3339))
	}
	for k, vs := range map[string][]string{"node": f.Nodes, "serial": f.Serials, "uuid": f.UUIDs, "kind": f.Kinds, "class": f.Classes} {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// GPUEvents lists GPU health events, oldest first (gpuq health).
func (c *Client) GPUEvents(ctx context.Context, f GPUEventQuery) ([]spec.GPUEvent, error) {
	var out GPUEventsResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/health/events", f.values(), nil, &out)
	return out.Events, err
}

// RMAReport summarises GPU health events by GPU serial, RMA candidates
// first (gpuq health --rma).
func (c *Client) RMAReport(ctx context.Context, f GPUEventQuery) ([]RMARow, error) {
	var out RMAResponse
	err := c.do(withCall(ctx, callOpts{patience: reportPatience}), http.MethodGet, "/health/rma", f.values(), nil, &out)
	return out.GPUs, err
}
