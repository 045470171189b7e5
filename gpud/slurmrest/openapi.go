package slurmrest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// The document at /openapi/v3 describes what gpud serves: every route of
// routeTable in every version that has it, with the members gpud writes.
// The schemas are inferred from what the field tables write for a sample
// record, so the document cannot drift from the answers; every integer
// is int64, as gpud's counters are (Slurm's documents say int32 for many).

var (
	docOnce sync.Once
	docJSON []byte
)

func (h *Handler) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	docOnce.Do(func() { docJSON = h.document() })
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(docJSON)
}

// infer returns a JSON schema for the JSON value v.
func infer(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		props := map[string]any{}
		for k, e := range x {
			props[k] = infer(e)
		}
		return map[string]any{"type": "object", "properties": props}
	case []any:
		items := map[string]any{}
		if len(x) > 0 {
			items = infer(x[0])
		}
		return map[string]any{"type": "array", "items": items}
	case string:
		return map[string]any{"type": "string"}
	case bool:
		return map[string]any{"type": "boolean"}
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			return map[string]any{"type": "number", "format": "double"}
		}
		return map[string]any{"type": "integer", "format": "int64"}
	}
	return map[string]any{}
}

func schemaOf(write func(w *jw)) map[string]any {
	w := &jw{}
	write(w)
	dec := json.NewDecoder(bytes.NewReader(w.b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return map[string]any{"type": "object"}
	}
	return infer(v)
}

// sampleJob is a running job with every field gpud has set, for schemas.
func sampleJob() *spec.Job {
	j := &spec.Job{ID: 1, User: "u", State: spec.StateRunning, Nodes: []string{"n1"}, GPUs: []string{"GPU-1"}}
	j.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 1, MemMiB: 1, GPUsPerNode: 1}
	j.Alloc = &spec.Alloc{Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, MemMiB: 1, GPUs: []string{"GPU-1"}}}}
	return j
}

func (h *Handler) document() []byte {
	schemas := map[string]any{}
	paths := map[string]any{}
	for _, v := range Versions {
		name := versionName(v)
		jr := &jobRec{Job: sampleJob(), cluster: "c"}
		schemas[name+"_job_info"] = schemaOf(func(w *jw) { w.v = v; jobFields.write(w, v, jr) })
		n := &spec.Node{Inventory: spec.Inventory{Features: []string{"f"}}, State: spec.NodeIdle, Partitions: []string{"p"}}
		schemas[name+"_node"] = schemaOf(func(w *jw) { w.v = v; nodeFields.write(w, v, &nodeRec{Node: n}) })
		p := &api.Partition{Name: "p", State: "UP", Nodes: []string{"n1"}}
		schemas[name+"_partition_info"] = schemaOf(func(w *jw) { w.v = v; partFields.write(w, v, &partRec{Partition: p}) })
		aj := &api.AcctJob{AcctRecord: api.AcctRecord{ID: 1, Nodes: []string{"n1"}}, Steps: []api.AcctStep{{Step: spec.Step{ID: "batch", Nodes: []string{"n1"}}}}}
		schemas[name+"_job"] = schemaOf(func(w *jw) { w.v = v; acctFields.write(w, v, &acctRec{AcctJob: aj}) })
		c := &call{h: h, v: v}
		schemas[name+"_openapi_envelope"] = schemaOf(func(w *jw) {
			w.begin('{')
			c.envelope(w)
			w.end('}')
		})
		for _, rt := range routeTable() {
			if !rt.has(v) {
				continue
			}
			p := rt.docPath(v)
			ops, _ := paths[p].(map[string]any)
			if ops == nil {
				ops = map[string]any{}
				paths[p] = ops
			}
			op := map[string]any{
				"tags":        []string{rt.plugin},
				"operationId": rt.plugin + "_" + strings.ReplaceAll(name, ".", "") + "_" + strings.ToLower(rt.method) + "_" + strings.NewReplacer("/", "_", "{", "", "}", "").Replace(strings.TrimSuffix(rt.path, "/")),
				"responses": map[string]any{
					"200":     map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + name + "_openapi_envelope"}}}},
					"default": map[string]any{"description": "error: the same envelope with errors", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + name + "_openapi_envelope"}}}},
				},
			}
			if i := strings.Index(rt.path, "{"); i >= 0 {
				param := strings.TrimSuffix(rt.path[i+1:], "}")
				param, _, _ = strings.Cut(param, "}")
				op["parameters"] = []any{map[string]any{"name": param, "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}
			}
			ops[strings.ToLower(rt.method)] = op
		}
	}
	names := make([]string, 0, len(Versions))
	for _, v := range Versions {
		names = append(names, versionName(v))
	}
	sort.Strings(names)
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "Slurm REST API as served by gpud",
			"description": "Slurm's REST API (slurmrestd data_parser " + strings.Join(names, ", ") + ") answered by gpud from one model; members gpud writes, every integer 64-bit. See docs/slurmrestd.md.",
			"version":     "gpud " + h.o.Release,
		},
		"servers":    []any{map[string]any{"url": "/"}},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": map[string]any{"user": map[string]any{"type": "apiKey", "in": "header", "name": "X-SLURM-USER-NAME"}, "token": map[string]any{"type": "apiKey", "in": "header", "name": "X-SLURM-USER-TOKEN"}, "bearerAuth": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}},
		"security":   []any{map[string]any{"user": []any{}, "token": []any{}}, map[string]any{"token": []any{}}, map[string]any{"bearerAuth": []any{}}},
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return []byte("{}")
	}
	return append(b, '\n')
}
