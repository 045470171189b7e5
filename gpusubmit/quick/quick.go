// Package quick is sbatch's one-shot path: a submission to a controller
// on a unix socket, sent over that socket without net/http, crypto/tls or
// urfave/cli linked in. The bin/sbatch program is this package; whatever
// it does not take (--help, usage the fast reading does not make, a TCP
// or TLS controller or a controller group, --wait, an unreachable
// socket) it hands to the full gpusubmit, run as sbatch, by exec.
//
// Why a program of its own: a Go process runs the init functions of every
// package it links before main. gpusubmit links the HTTP, TLS and X.509
// stacks and urfave/cli, and their initialisation was a third of an
// `sbatch --hold --wrap true` process (1.9-2.2 ms of CPU for
// `sbatch --version`, against 0.9-1.1 ms for a Go program that links
// only this path; perf stat, 2026-12-01). In a shell loop of sbatch that
// was the difference between gpud and Slurm's rate (issue 14).
//
// The submission itself (reading the command line, the script, every
// check) is package submission's, shared with gpusubmit, and
// TestQuickMatchesApp holds the two programs to the same answers.
package quick

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/exitstatus"
	"github.com/gpud/gpud/cli/submission"
	"github.com/gpud/gpud/cli/termsafe"
	"github.com/gpud/gpud/gpud/api/wire"
	"github.com/gpud/gpud/gpud/spec"
)

// Handoff says that the full gpusubmit must run this command line, and
// why (for tests); Script is the script read from standard input before
// that was known (it must be given to gpusubmit as its standard input),
// nil when standard input was not read.
type Handoff struct {
	Why    string
	Script []byte
}

// Run runs sbatch with args (args[0] the program). It returns the exit
// status, or a non-nil Handoff when the full gpusubmit must run it
// instead; then nothing was written and no request changed anything.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, *Handoff) {
	// Messages echo text from the controller: escaped when printed.
	stdout, stderr = termsafe.New(stdout), termsafe.New(stderr)
	if len(args) == 2 && (args[1] == "--version" || args[1] == "-V") {
		fmt.Fprintln(stdout, wire.SlurmVersion)
		return 0, nil
	}
	in, ok := submission.Fast("sbatch", directive.Normalize(args))
	if !ok {
		return 0, &Handoff{Why: "not a submission the one-shot path reads (--help, or usage only urfave/cli answers)"}
	}
	sock, ok := unixSocket(in.Controller)
	if !ok {
		return 0, &Handoff{Why: "controller " + in.Controller + " is not one unix socket"}
	}
	// Warnings are held until it is known that this path answers: the
	// full gpusubmit would print them again.
	var warnings bytes.Buffer
	in.Stdin, in.Stdout, in.Stderr = stdin, stdout, &warnings
	read := &readTracker{r: stdin}
	if stdin != nil {
		in.Stdin = read
	}
	p, err := submission.Prepare(in)
	if err == nil && p.Wait {
		// --wait follows the job with the API client's long polls and
		// their retries across a controller restart: gpusubmit's.
		return 0, handoff("--wait", read)
	}
	stderr.Write(warnings.Bytes())
	fail := func(err error) (int, *Handoff) {
		exitstatus.Print(stderr, "sbatch", err)
		return exitstatus.Code(err), nil
	}
	if err != nil {
		return fail(err)
	}
	req := p.SubmitRequest()
	body, err := json.Marshal(req)
	if err != nil {
		return fail(fmt.Errorf("encode request: %w", err))
	}
	resp, sent, err := post(sock, "/"+wire.Version+"/jobs", req.IdempotencyKey, body)
	var werr *wire.Error
	switch {
	case err != nil && !sent:
		// Nothing reached the controller: gpusubmit tries again and
		// says why it cannot reach it, in its own words.
		return 0, handoff("controller unreachable: "+err.Error(), read)
	case errors.As(err, &werr) && werr.Code == wire.CodeNotLeader:
		// Refused unmade by a follower; gpusubmit names the leader.
		return 0, handoff("not the leader", read)
	case err != nil:
		return fail(fmt.Errorf("submit %s: %w", p.ScriptName, err))
	}
	p.PrintSubmitted(stdout, stderr, resp)
	return 0, nil
}

func handoff(why string, r *readTracker) *Handoff {
	h := &Handoff{Why: why}
	if r.read {
		h.Script = r.buf.Bytes()
	}
	return h
}

// readTracker keeps what was read from standard input, for a handoff.
type readTracker struct {
	r    io.Reader
	buf  bytes.Buffer
	read bool
}

func (t *readTracker) Read(b []byte) (int, error) {
	t.read = true
	n, err := t.r.Read(b)
	t.buf.Write(b[:n])
	return n, err
}

// unixSocket is the path of addr when it is one unix:///path address.
func unixSocket(addr string) (string, bool) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, ",?#") {
		return "", false
	}
	return path, true
}

// post sends one POST with a JSON body over a new connection to the unix
// socket at sock and reads the answer: the decoded SubmitResponse, or a
// *wire.Error for a non-2xx answer (as gpud/api.Client makes them). sent
// says whether any of the request was written: when it is false the
// controller cannot have acted on it.
func post(sock, path, key string, body []byte) (resp wire.SubmitResponse, sent bool, err error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return resp, false, fmt.Errorf("socket: %w", err)
	}
	conn := os.NewFile(uintptr(fd), sock)
	defer conn.Close()
	if err := connect(fd, sock); err != nil {
		return resp, false, fmt.Errorf("dial unix %s: connect: %w", sock, err)
	}
	var req bytes.Buffer
	req.Grow(256 + len(body))
	req.WriteString("POST " + path + " HTTP/1.1\r\nHost: gpud\r\nUser-Agent: sbatch (gpud)\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	if key != "" {
		req.WriteString(wire.HeaderIdempotencyKey + ": " + key + "\r\n")
	}
	req.WriteString("Connection: close\r\n\r\n")
	req.Write(body)
	if n, err := conn.Write(req.Bytes()); err != nil {
		return resp, n > 0, fmt.Errorf("send the request: %w", err)
	}
	status, text, err := readResponse(bufio.NewReader(conn))
	if err != nil {
		return resp, true, err
	}
	if status/100 != 2 {
		var eb wire.ErrorBody
		if json.Unmarshal(text, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = fmt.Sprintf("controller answered %d %s: %s", status, statusText(status), strings.TrimSpace(string(text)))
		}
		return resp, true, &wire.Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if err := json.Unmarshal(text, &resp); err != nil {
		return resp, true, fmt.Errorf("decode POST /jobs response: %w", err)
	}
	return resp, true, nil
}

// connect connects fd to the unix socket at path, retrying when a signal
// interrupts it.
func connect(fd int, path string) error {
	for {
		err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			return err
		}
	}
}

// maxAnswer bounds what is read of an answer to a submission (a few
// hundred bytes; an error message at most a few kilobytes).
const maxAnswer = 1 << 20

// readResponse reads an HTTP/1.1 answer to a request sent with
// "Connection: close": the status, then the body, delimited by
// Content-Length, chunked, or the end of the connection.
func readResponse(r *bufio.Reader) (int, []byte, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, fmt.Errorf("read the controller's answer: %w", err)
	}
	proto, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
		return 0, nil, fmt.Errorf("read the controller's answer: malformed status line %q", strings.TrimSpace(line))
	}
	length, chunked := int64(-1), false
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return 0, nil, fmt.Errorf("read the controller's answer: %w", err)
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, _ := strings.Cut(h, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			if length, err = strconv.ParseInt(value, 10, 64); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("read the controller's answer: bad Content-Length %q", value)
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(value, "chunked")
		}
	}
	var body []byte
	switch {
	case status/100 == 1 || status == 204 || status == 304:
		// No body.
	case chunked:
		body, err = readChunked(r)
	case length >= 0:
		if length > maxAnswer {
			return 0, nil, fmt.Errorf("read the controller's answer: %d bytes is more than an answer to a submission", length)
		}
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	default:
		body, err = io.ReadAll(io.LimitReader(r, maxAnswer))
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read the controller's answer: %w", err)
	}
	return status, body, nil
}

// readChunked reads a chunked body (RFC 9112 §7.1), ignoring extensions
// and trailers.
func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ";")
		n, err := strconv.ParseUint(strings.TrimSpace(size), 16, 32)
		if err != nil {
			return nil, fmt.Errorf("bad chunk size %q", strings.TrimSpace(line))
		}
		if n == 0 {
			for { // trailers, up to the blank line
				t, err := r.ReadString('\n')
				if err != nil || strings.TrimRight(t, "\r\n") == "" {
					return body, nil
				}
			}
		}
		if len(body)+int(n) > maxAnswer {
			return nil, fmt.Errorf("more than %d bytes: more than an answer to a submission", maxAnswer)
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, err
		}
		if _, err := r.Discard(2); err != nil { // CRLF after the chunk
			return nil, err
		}
	}
}

// statusText is net/http's StatusText for the statuses the controller
// answers with, for the message of an answer whose body says nothing.
func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 409:
		return "Conflict"
	case 413:
		return "Request Entity Too Large"
	case 421:
		return "Misdirected Request"
	case 422:
		return "Unprocessable Entity"
	case 429:
		return "Too Many Requests"
	case 500:
		return "Internal Server Error"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	}
	return ""
}

// Exec replaces this process with the full gpusubmit beside this program,
// run as sbatch with the same arguments; h.Script, when set, becomes its
// standard input. It returns only when that cannot be done.
func Exec(args []string, h *Handoff) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program (%v), to run gpusubmit beside it; run gpusubmit instead", err)
	}
	full := self[:strings.LastIndexByte(self, '/')+1] + "gpusubmit"
	if h.Script != nil {
		if err := stdinFrom(h.Script); err != nil {
			return err
		}
	}
	argv := append([]string{"sbatch"}, args[1:]...)
	err = syscall.Exec(full, argv, os.Environ())
	return spec.Errorf(spec.ErrUnavailable, "run %s for this command line (%s): %v; sbatch needs gpud's gpusubmit installed beside it (make install)", full, h.Why, err)
}
