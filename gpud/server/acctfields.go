package server

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// acctFieldEnc appends one field of an api.AcctJob to a JSON object: a
// comma, its key and its value, as encoding/json writes them (the time
// fields through spec.Time's own encoding).
type acctFieldEnc func(b []byte, j *api.AcctJob) []byte

func strField(key string, get func(j *api.AcctJob) string) acctFieldEnc {
	k := `,"` + key + `":`
	return func(b []byte, j *api.AcctJob) []byte { return spec.AppendJSONString(append(b, k...), get(j)) }
}

func intField(key string, get func(j *api.AcctJob) int64) acctFieldEnc {
	k := `,"` + key + `":`
	return func(b []byte, j *api.AcctJob) []byte { return strconv.AppendInt(append(b, k...), get(j), 10) }
}

func floatField(key string, get func(j *api.AcctJob) float64) acctFieldEnc {
	k := `,"` + key + `":`
	return func(b []byte, j *api.AcctJob) []byte {
		f := get(j)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = 0
		}
		return strconv.AppendFloat(append(b, k...), f, 'g', -1, 64)
	}
}

func timeField(key string, get func(j *api.AcctJob) spec.Time) acctFieldEnc {
	k := `,"` + key + `":`
	return func(b []byte, j *api.AcctJob) []byte { return get(j).AppendJSON(append(b, k...)) }
}

// requestField writes the job's request as submitted (null when the
// record predates it) through encoding/json: a nested object, asked for
// by gpud simulate's export, not by sacct's hot path.
func requestField(b []byte, j *api.AcctJob) []byte {
	b = append(b, `,"request":`...)
	if j.Request == nil {
		return append(b, "null"...)
	}
	r, err := json.Marshal(j.Request)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, r...)
}

func strsField(key string, get func(j *api.AcctJob) []string) acctFieldEnc {
	k := `,"` + key + `":`
	return func(b []byte, j *api.AcctJob) []byte {
		ss := get(j)
		if ss == nil {
			return append(append(b, k...), "null"...)
		}
		b = append(append(b, k...), '[')
		for i, s := range ss {
			if i > 0 {
				b = append(b, ',')
			}
			b = spec.AppendJSONString(b, s)
		}
		return append(b, ']')
	}
}

// acctFields are the fields= names GET /v1/accounting/jobs takes: the
// JSON keys of api.AcctJob (id is always sent; attempt_history and steps
// have their own parameters). TestAcctFieldsCoverAcctJob keeps the list
// complete.
var acctFields = map[string]acctFieldEnc{
	"name":               strField("name", func(j *api.AcctJob) string { return j.Name }),
	"user":               strField("user", func(j *api.AcctJob) string { return j.User }),
	"uid":                intField("uid", func(j *api.AcctJob) int64 { return int64(j.UID) }),
	"account":            strField("account", func(j *api.AcctJob) string { return j.Account }),
	"partition":          strField("partition", func(j *api.AcctJob) string { return j.Partition }),
	"qos":                strField("qos", func(j *api.AcctJob) string { return j.QOS }),
	"state":              strField("state", func(j *api.AcctJob) string { return string(j.State) }),
	"reason":             strField("reason", func(j *api.AcctJob) string { return j.Reason }),
	"exit_code":          intField("exit_code", func(j *api.AcctJob) int64 { return int64(j.ExitCode) }),
	"exit_signal":        intField("exit_signal", func(j *api.AcctJob) int64 { return int64(j.Signal) }),
	"submit_time":        timeField("submit_time", func(j *api.AcctJob) spec.Time { return j.SubmitTime }),
	"eligible_time":      timeField("eligible_time", func(j *api.AcctJob) spec.Time { return j.EligibleTime }),
	"start_time":         timeField("start_time", func(j *api.AcctJob) spec.Time { return j.StartTime }),
	"end_time":           timeField("end_time", func(j *api.AcctJob) spec.Time { return j.EndTime }),
	"time_limit":         intField("time_limit", func(j *api.AcctJob) int64 { return int64(j.TimeLimit.Std().Seconds()) }),
	"nodes":              strsField("nodes", func(j *api.AcctJob) []string { return j.Nodes }),
	"gpus":               strsField("gpus", func(j *api.AcctJob) []string { return j.GPUs }),
	"gpu_count":          intField("gpu_count", func(j *api.AcctJob) int64 { return int64(j.GPUCount) }),
	"gpu_model":          strField("gpu_model", func(j *api.AcctJob) string { return j.GPUModel }),
	"gpu_profile":        strField("gpu_profile", func(j *api.AcctJob) string { return j.GPUProfile }),
	"gpu_fraction":       floatField("gpu_fraction", func(j *api.AcctJob) float64 { return j.GPUFraction }),
	"cpus":               intField("cpus", func(j *api.AcctJob) int64 { return int64(j.CPUs) }),
	"mem_mib":            intField("mem_mib", func(j *api.AcctJob) int64 { return j.MemMiB }),
	"attempts":           intField("attempts", func(j *api.AcctJob) int64 { return int64(j.Attempts) }),
	"work_dir":           strField("work_dir", func(j *api.AcctJob) string { return j.WorkDir }),
	"array_job_id":       intField("array_job_id", func(j *api.AcctJob) int64 { return int64(j.ArrayJobID) }),
	"array_task_id":      intField("array_task_id", func(j *api.AcctJob) int64 { return int64(j.ArrayTaskID) }),
	"het_job_id":         intField("het_job_id", func(j *api.AcctJob) int64 { return int64(j.HetJobID) }),
	"het_job_offset":     intField("het_job_offset", func(j *api.AcctJob) int64 { return int64(j.HetOffset) }),
	"wckey":              strField("wckey", func(j *api.AcctJob) string { return j.WCKey }),
	"ntasks":             intField("ntasks", func(j *api.AcctJob) int64 { return int64(j.NTasks) }),
	"request":            requestField,
	"dependency":         strField("dependency", func(j *api.AcctJob) string { return j.Dependency }),
	"nice":               intField("nice", func(j *api.AcctJob) int64 { return int64(j.Nice) }),
	"array_max":          intField("array_max", func(j *api.AcctJob) int64 { return int64(j.ArrayMax) }),
	"elapsed":            intField("elapsed", func(j *api.AcctJob) int64 { return j.Elapsed }),
	"gpu_hours":          floatField("gpu_hours", func(j *api.AcctJob) float64 { return j.GPUHours }),
	"cpu_hours":          floatField("cpu_hours", func(j *api.AcctJob) float64 { return j.CPUHours }),
	"slice_hours":        floatField("slice_hours", func(j *api.AcctJob) float64 { return j.SliceHours }),
	"gpu_util":           floatField("gpu_util", func(j *api.AcctJob) float64 { return j.GPUUtil }),
	"energy_kwh":         floatField("energy_kwh", func(j *api.AcctJob) float64 { return j.EnergyKWh }),
	"co2_kg":             floatField("co2_kg", func(j *api.AcctJob) float64 { return j.CO2Kg }),
	"cost":               floatField("cost", func(j *api.AcctJob) float64 { return j.Cost }),
	"max_rss_mib":        floatField("max_rss_mib", func(j *api.AcctJob) float64 { return j.MaxRSSMiB }),
	"ave_rss_mib":        floatField("ave_rss_mib", func(j *api.AcctJob) float64 { return j.AveRSSMiB }),
	"max_rss_node":       strField("max_rss_node", func(j *api.AcctJob) string { return j.MaxRSSNode }),
	"image_pull_seconds": floatField("image_pull_seconds", func(j *api.AcctJob) float64 { return j.ImagePullSeconds }),
	"image_pull_bytes":   intField("image_pull_bytes", func(j *api.AcctJob) int64 { return j.ImagePullBytes }),
}

// acctUsageFields are the fields accounting sums from usage, attempts
// and samples (accounting.Filter.NoUsage leaves them zero).
var acctUsageFields = []string{"gpu_hours", "cpu_hours", "slice_hours", "gpu_util", "energy_kwh", "co2_kg", "cost",
	"max_rss_mib", "ave_rss_mib", "max_rss_node"}

// parseAcctFields reads fields=: comma-separated (or repeated) JSON keys
// of api.AcctJob; nil when absent (every field).
func parseAcctFields(vs []string) ([]acctFieldEnc, bool, error) {
	if len(vs) == 0 {
		return nil, false, nil
	}
	var encs []acctFieldEnc
	var seen []string
	for _, v := range vs {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" || name == "id" || slices.Contains(seen, name) {
				continue
			}
			enc, ok := acctFields[name]
			if !ok {
				names := make([]string, 0, len(acctFields))
				for k := range acctFields {
					names = append(names, k)
				}
				slices.Sort(names)
				return nil, false, spec.Errorf(spec.ErrInvalid, "query parameter fields: %q is not a field of an accounting record; use id and any of %s (steps= and attempt_history= ask for those)", name, strings.Join(names, ","))
			}
			seen = append(seen, name)
			encs = append(encs, enc)
		}
	}
	return encs, true, nil
}

// writeAcctFields streams {"jobs":[...]} with only the asked fields of
// each job (and its steps and attempt history when asked), so that
// sacct's four columns over 100,000 jobs cost those bytes and no
// reflection; a decoder reads the other fields as zero.
func (s *Server) writeAcctFields(w http.ResponseWriter, jobs []api.AcctJob, encs []acctFieldEnc, history, steps bool) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	b := make([]byte, 0, 1024)
	b = append(b, `{"jobs":[`...)
	for i := range jobs {
		j := &jobs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendUint(b, uint64(j.ID), 10)
		for _, enc := range encs {
			b = enc(b, j)
		}
		for _, x := range []struct {
			on  bool
			key string
			v   any
		}{{history, `,"attempt_history":`, j.AttemptHistory}, {steps, `,"steps":`, j.Steps}} {
			if !x.on {
				continue
			}
			v, err := json.Marshal(x.v)
			if err != nil {
				s.log.Error("encode accounting record", "job", j.ID, "err", err)
				return
			}
			b = append(append(b, x.key...), v...)
		}
		b = append(b, '}')
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				s.log.Debug("write response", "err", err)
				return
			}
			b = b[:0]
		}
	}
	b = append(b, "]}\n"...)
	if _, err := bw.Write(b); err != nil {
		s.log.Debug("write response", "err", err)
		return
	}
	if err := bw.Flush(); err != nil {
		s.log.Debug("write response", "err", err)
	}
}
