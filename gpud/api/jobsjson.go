package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/spec"
)

// UnmarshalJSON implements json.Unmarshaler. A job list can hold 100,000
// jobs, and encoding/json's reflection made decoding it take over a
// second, so the form the server writes is parsed by hand in one pass.
// A library was measured first: go-json-experiment/json (the json/v2
// prototype) decoded the 100,000-job brief list in 265 ms against 75 ms
// here, too slow for gpuq's 300 ms budget with everything else it does.
// The result is exactly what encoding/json gives: a job object with
// anything the fast path does not handle (an unknown or case-folded key,
// null where a value was expected, escapes it cannot take, a number out of
// range) is handed to encoding/json, and so is a body it cannot parse,
// so errors (and the partial result that comes with a type error) read
// as encoding/json's decoding into a zero JobsResponse. Jobs is replaced,
// never merged into.
func (r *JobsResponse) UnmarshalJSON(data []byte) error {
	d := jobsDecoder{data: data, interned: make(map[string]string, 64)}
	if jobs, ok := d.response(); ok {
		r.Jobs = jobs
		return nil
	}
	type plain JobsResponse // without this method
	*r = JobsResponse{}
	return json.Unmarshal(data, (*plain)(r))
}

// maxInterned bounds the table of repeated strings one decode shares.
const maxInterned = 1 << 14

type jobsDecoder struct {
	data []byte
	pos  int
	// strs interns repeated strings (users, states, partitions, nodes),
	// so 100,000 jobs share a few hundred of them.
	interned map[string]string
	// fallbacks counts job objects handed to encoding/json (for tests).
	fallbacks int
	// backing, when set, is data as a string: a string without escapes
	// is then a substring of it, not an allocation of its own
	// (decodeAssignments).
	backing string
}

func (d *jobsDecoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// consume skips white space and then c, if it is next.
func (d *jobsDecoder) consume(c byte) bool {
	d.ws()
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *jobsDecoder) literal(lit string) bool {
	d.ws()
	if len(d.data)-d.pos >= len(lit) && string(d.data[d.pos:d.pos+len(lit)]) == lit {
		d.pos += len(lit)
		return true
	}
	return false
}

// response parses {"jobs":[...]} or {"jobs":null}.
func (d *jobsDecoder) response() ([]spec.Job, bool) {
	if !d.consume('{') || !d.literal(`"jobs"`) || !d.consume(':') {
		return nil, false
	}
	var jobs []spec.Job
	if !d.literal("null") {
		if !d.consume('[') {
			return nil, false
		}
		jobs = make([]spec.Job, 0, d.estimate())
		if !d.consume(']') {
			for {
				jobs = append(jobs, spec.Job{})
				if !d.jobOrFallback(&jobs[len(jobs)-1]) {
					return nil, false
				}
				if d.consume(']') {
					break
				}
				if !d.consume(',') {
					return nil, false
				}
			}
		}
	}
	if !d.consume('}') {
		return nil, false
	}
	d.ws()
	return jobs, d.pos == len(d.data)
}

// estimate counts the jobs the server wrote (each starts with its id;
// an allocation's id may add a few), so the slice of ~600-byte jobs is
// allocated once instead of doubled and copied as it fills.
func (d *jobsDecoder) estimate() int {
	return bytes.Count(d.data[d.pos:], []byte(`{"id":`)) + 1
}

// jobOrFallback decodes one job object into j (which is zero), by hand or
// else with encoding/json; false means the body is not valid JSON here.
func (d *jobsDecoder) jobOrFallback(j *spec.Job) bool {
	d.ws()
	start := d.pos
	if d.job(j) {
		return true
	}
	d.pos = start
	if !d.skip() {
		return false
	}
	d.fallbacks++
	*j = spec.Job{}
	return json.Unmarshal(d.data[start:d.pos], j) == nil
}

// object calls field for each key of an object; field returns false to
// abandon the fast path.
func (d *jobsDecoder) object(field func(key []byte) bool) bool {
	if !d.consume('{') {
		return false
	}
	if d.consume('}') {
		return true
	}
	for {
		d.ws()
		key, ok := d.rawString()
		if !ok || !d.consume(':') {
			return false
		}
		d.ws()
		if !field(key) {
			return false
		}
		if d.consume('}') {
			return true
		}
		if !d.consume(',') {
			return false
		}
	}
}

func (d *jobsDecoder) job(j *spec.Job) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			n, ok := d.uint(64)
			j.ID = spec.JobID(n)
			return ok
		case "name":
			return d.str(&j.Name)
		case "partition":
			return d.str(&j.Partition)
		case "qos":
			return d.str(&j.QOS)
		case "account":
			return d.str(&j.Account)
		case "resources":
			return d.resources(&j.Resources)
		case "time_limit":
			return d.duration(&j.TimeLimit)
		case "time_unlimited":
			return d.bool(&j.TimeUnlimited)
		case "script":
			return d.str(&j.Script)
		case "args":
			return d.strs(&j.Args)
		case "env":
			return d.strs(&j.Env)
		case "work_dir":
			return d.str(&j.WorkDir)
		case "submit_dir":
			return d.str(&j.SubmitDir)
		case "submit_host":
			return d.str(&j.SubmitHost)
		case "output":
			return d.str(&j.Output)
		case "error":
			return d.str(&j.Error)
		case "image":
			return d.str(&j.Image)
		case "container":
			return d.raw(&j.Container) // rare: pyxis's options
		case "hold":
			return d.bool(&j.Hold)
		case "nice":
			return d.int(&j.Nice)
		case "begin_time":
			return d.time(&j.BeginTime)
		case "requeue":
			return d.bool(&j.Requeue)
		case "requeue_expedite":
			return d.bool(&j.RequeueExpedite)
		case "array":
			return d.str(&j.Array)
		case "dependency":
			return d.str(&j.Depend)
		case "signal":
			return d.str(&j.JobSpec.Signal)
		case "checkpoint_interval":
			return d.duration(&j.Ckpt)
		case "comment":
			return d.str(&j.Comment)
		case "checkpoint_mode":
			return d.str(&j.CkptMode)
		case "tasks":
			return d.tasks(&j.Tasks)
		case "signal_alloc":
			return d.str(&j.SignalAlloc)
		case "signal_name":
			return d.str(&j.SignalName)
		case "signal_seq":
			return d.int(&j.SignalSeq)
		case "open_mode":
			return d.str(&j.OpenMode)
		case "wckey":
			return d.str(&j.WCKey)
		case "interactive":
			return d.bool(&j.Interactive)
		case "reservation":
			return d.str(&j.Reservation)
		case "time_min":
			return d.duration(&j.TimeMin)
		case "user":
			return d.str(&j.User)
		case "uid":
			n, ok := d.uint(32)
			j.UID = uint32(n)
			return ok
		case "gid":
			n, ok := d.uint(32)
			j.GID = uint32(n)
			return ok
		case "state":
			return d.str((*string)(&j.State))
		case "reason":
			return d.str(&j.Reason)
		case "exit_code":
			return d.int(&j.ExitCode)
		case "exit_signal":
			return d.int(&j.Signal)
		case "priority":
			n, ok := d.int64()
			j.Priority = n
			return ok
		case "submit_time":
			return d.time(&j.SubmitTime)
		case "start_time":
			return d.time(&j.StartTime)
		case "end_time":
			return d.time(&j.EndTime)
		case "attempt":
			return d.int(&j.Attempt)
		case "suspend_time":
			return d.time(&j.SuspendTime)
		case "suspended":
			return d.duration(&j.Suspended)
		case "hw_requeues":
			return d.int(&j.HWRequeues)
		case "expedited":
			return d.bool(&j.Expedited)
		case "array_job_id":
			n, ok := d.uint(64)
			j.ArrayJobID = spec.JobID(n)
			return ok
		case "array_task_id":
			return d.int(&j.ArrayTaskID)
		case "het_job_id":
			n, ok := d.uint(64)
			j.HetJobID = spec.JobID(n)
			return ok
		case "het_offset":
			return d.int(&j.HetOffset)
		case "het_size":
			return d.int(&j.HetSize)
		case "nodes":
			return d.strs(&j.Nodes)
		case "gpus":
			return d.strs(&j.GPUs)
		case "alloc":
			return d.alloc(&j.Alloc)
		case "stop_state":
			return d.str((*string)(&j.StopState))
		case "stop_reason":
			return d.str(&j.StopReason)
		case "stop_checkpoint":
			return d.bool(&j.StopCheckpoint)
		case "checkpoints":
			return d.int(&j.Checkpoints)
		case "last_checkpoint":
			return d.checkpointRef(&j.LastCheckpoint)
		case "lost_work":
			return d.duration(&j.LostWork)
		case "stdout_path":
			return d.str(&j.StdoutPath)
		case "stderr_path":
			return d.str(&j.StderrPath)
		case "expected_start":
			return d.time(&j.ExpectedStart)
		case "partitions":
			return d.strs(&j.Partitions)
		case "node_reasons":
			return d.str(&j.NodeReasons)
		case "idle_gpu":
			return d.str(&j.IdleGPU)
		case "image_pull":
			return d.raw(&j.ImagePull) // rare: while a pull runs
		case "idempotency_key":
			return d.str(&j.IdempotencyKey)
		case "signal_target":
			return d.str(&j.SignalTarget)
		case "steps":
			return d.steps(&j.Steps)
		case "step_signals":
			return d.raw(&j.StepSignals)
		case "step_signal_seq":
			return d.int(&j.StepSignalSeq)
		case "notices":
			return d.raw(&j.Notices)
		case "notice_seq":
			return d.int(&j.NoticeSeq)
		case "interrupted":
			return d.raw(&j.Interrupted) // rare: a requeued job's kept run
		}
		return false
	})
}

func (d *jobsDecoder) resources(r *spec.Resources) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "nodes":
			return d.int(&r.Nodes)
		case "max_nodes":
			return d.int(&r.MaxNodes)
		case "cpus_per_node":
			return d.int(&r.CPUsPerNode)
		case "mem_mib_per_node":
			n, ok := d.int64()
			r.MemMiB = n
			return ok
		case "mem_whole_node":
			return d.bool(&r.MemWholeNode)
		case "gpus_per_node":
			return d.int(&r.GPUsPerNode)
		case "gpu_model":
			return d.str(&r.GPUModel)
		case "gpu_profile":
			return d.str(&r.GPUProfile)
		case "gpu_fraction":
			return d.float(&r.GPUFraction)
		case "total_gpus":
			return d.int(&r.TotalGPUs)
		case "rdma":
			return d.int(&r.RDMA)
		case "exclusive":
			return d.bool(&r.Exclusive)
		case "nodelist":
			return d.strs(&r.NodeList)
		case "exclude":
			return d.strs(&r.Exclude)
		case "constraint":
			return d.str(&r.Constraint)
		}
		return false
	})
}

func (d *jobsDecoder) tasks(t *spec.Tasks) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "ntasks":
			return d.int(&t.NTasks)
		case "ntasks_per_node":
			return d.int(&t.NTasksPerNode)
		case "cpus_per_task":
			return d.int(&t.CPUsPerTask)
		case "gpus_per_task":
			return d.int(&t.GPUsPerTask)
		}
		return false
	})
}

func (d *jobsDecoder) checkpointRef(c *spec.CheckpointRef) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "attempt":
			return d.int(&c.Attempt)
		case "seq":
			return d.int(&c.Seq)
		case "time":
			return d.time(&c.Time)
		case "bytes":
			n, ok := d.int64()
			c.Bytes = n
			return ok
		}
		return false
	})
}

// alloc decodes a job's allocation (every assignment's job has one) by
// hand, or else hands it to encoding/json.
func (d *jobsDecoder) alloc(p **spec.Alloc) bool {
	start := d.pos
	if d.literal("null") {
		*p = nil
		return true
	}
	a := new(spec.Alloc)
	if d.allocFields(a) { // assigndecode.go
		*p = a
		return true
	}
	d.pos = start
	if !d.skip() {
		return false
	}
	a = new(spec.Alloc)
	if json.Unmarshal(d.data[start:d.pos], a) != nil {
		return false
	}
	*p = a
	return true
}

// steps decodes a job's steps by hand, or else with encoding/json.
func (d *jobsDecoder) steps(p *[]spec.Step) bool {
	start := d.pos
	if d.stepList(p) { // assigndecode.go
		return true
	}
	d.pos, *p = start, nil
	return d.raw(p)
}

// raw decodes the next value into p with encoding/json (steps: rare, and
// only on running jobs).
func (d *jobsDecoder) raw(p any) bool {
	start := d.pos
	if !d.skip() {
		return false
	}
	return json.Unmarshal(d.data[start:d.pos], p) == nil
}

// rawString reads a string with no escapes, control characters or
// non-ASCII bytes and returns its contents, aliasing data.
func (d *jobsDecoder) rawString() ([]byte, bool) {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return nil, false
	}
	for i := d.pos + 1; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			s := d.data[d.pos+1 : i]
			d.pos = i + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

func (d *jobsDecoder) str(p *string) bool {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return false
	}
	start := d.pos
	if b, ok := d.rawString(); ok {
		if d.backing != "" {
			*p = d.backing[start+1 : d.pos-1]
		} else {
			*p = d.intern(b)
		}
		return true
	}
	// Escapes or non-ASCII: find the end; the usual escapes (a script's
	// newlines, quotes) are undone here, anything else by encoding/json.
	if !d.skip() {
		return false
	}
	if s, ok := unescape(d.data[start+1 : d.pos-1]); ok {
		*p = s
		return true
	}
	var s string
	if json.Unmarshal(d.data[start:d.pos], &s) != nil {
		return false
	}
	*p = s
	return true
}

// unescape returns the JSON string body raw (between its quotes) with its
// escapes undone, as encoding/json would, in one allocation; false (for
// encoding/json) for a \u escape, a control character or invalid UTF-8.
func unescape(raw []byte) (string, bool) {
	if !utf8.Valid(raw) {
		return "", false
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i++; i == len(raw) {
			return "", false
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default:
			return "", false
		}
	}
	return string(out), true
}

func (d *jobsDecoder) intern(b []byte) string {
	if d.interned == nil {
		return string(b)
	}
	if s, ok := d.interned[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= 64 && len(d.interned) < maxInterned {
		d.interned[s] = s
	}
	return s
}

// strs reads an array of strings, or null (a nil slice, as encoding/json).
func (d *jobsDecoder) strs(p *[]string) bool {
	if d.literal("null") {
		*p = nil
		return true
	}
	if !d.consume('[') {
		return false
	}
	out := make([]string, 0, 4)
	if !d.consume(']') {
		for {
			d.ws()
			var s string
			if !d.str(&s) {
				return false
			}
			out = append(out, s)
			if d.consume(']') {
				break
			}
			if !d.consume(',') {
				return false
			}
		}
	}
	*p = out
	return true
}

func (d *jobsDecoder) bool(p *bool) bool {
	switch {
	case d.literal("true"):
		*p = true
	case d.literal("false"):
		*p = false
	default:
		return false
	}
	return true
}

// number returns the next JSON number literal, checked against JSON's
// grammar, and whether it is an integer (no fraction or exponent).
func (d *jobsDecoder) number() (lit []byte, integer, ok bool) {
	b, i := d.data, d.pos
	digits := func() bool {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return nil, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return nil, false, false
		}
		integer = false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false, false
		}
		integer = false
	}
	lit = b[d.pos:i]
	d.pos = i
	return lit, integer, true
}

func (d *jobsDecoder) int64() (int64, bool) {
	lit, integer, ok := d.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(string(lit), 10, 64)
	return n, err == nil
}

func (d *jobsDecoder) int(p *int) bool {
	n, ok := d.int64()
	*p = int(n)
	return ok && int64(int(n)) == n
}

func (d *jobsDecoder) uint(bits int) (uint64, bool) {
	lit, integer, ok := d.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseUint(string(lit), 10, bits)
	return n, err == nil
}

func (d *jobsDecoder) float(p *float64) bool {
	lit, _, ok := d.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	*p = f
	return err == nil
}

func (d *jobsDecoder) time(p *spec.Time) bool {
	start := d.pos
	if !d.literal("null") {
		if _, ok := d.rawString(); !ok {
			return false
		}
	}
	return p.UnmarshalJSON(d.data[start:d.pos]) == nil
}

func (d *jobsDecoder) duration(p *spec.Duration) bool {
	lit, integer, ok := d.number()
	if !ok || !integer {
		return false
	}
	return p.UnmarshalJSON(lit) == nil
}

// skip moves past one JSON value, checking only what it must to find its
// end; encoding/json checks the rest when it decodes what skip spans.
func (d *jobsDecoder) skip() bool {
	d.ws()
	if d.pos >= len(d.data) {
		return false
	}
	switch c := d.data[d.pos]; c {
	case '"':
		for i := d.pos + 1; i < len(d.data); i++ {
			switch d.data[i] {
			case '\\':
				i++
			case '"':
				d.pos = i + 1
				return true
			}
		}
		return false
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		d.pos++
		if d.consume(closer) {
			return true
		}
		for {
			if c == '{' {
				d.ws()
				if !d.skip() || !d.consume(':') {
					return false
				}
			}
			if !d.skip() {
				return false
			}
			if d.consume(closer) {
				return true
			}
			if !d.consume(',') {
				return false
			}
		}
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	}
	_, _, ok := d.number()
	return ok
}
