package loadtest

import "testing"

// TestNodeRequestsAdd: the node routes' request counts are summed over
// their status codes; other routes, the histogram's buckets and sums, and
// malformed lines are not counted.
func TestNodeRequestsAdd(t *testing.T) {
	var n nodeRequests
	for _, l := range []string{
		`gpud_api_request_duration_seconds_count{code="200",route="GET /v1/nodes/{name}/assignments"} 1500`,
		`gpud_api_request_duration_seconds_count{code="503",route="GET /v1/nodes/{name}/assignments"} 7`,
		`gpud_api_request_duration_seconds_bucket{code="200",route="GET /v1/nodes/{name}/assignments",le="0.005"} 900`,
		`gpud_api_request_duration_seconds_sum{code="200",route="GET /v1/nodes/{name}/assignments"} 12.5`,
		`gpud_api_request_duration_seconds_count{code="200",route="POST /v1/nodes/{name}/events"} 300`,
		`gpud_api_request_duration_seconds_count{code="200",route="GET /v1/nodes/{name}/assignments?watch=1 answer"} 40`,
		`gpud_api_request_duration_seconds_count{code="200",route="POST /v1/nodes/{name}/heartbeat"} 40`,
		`gpud_api_request_duration_seconds_count{code="200",route="GET /v1/nodes/{name}/assignments"} notanumber`,
		`# HELP gpud_api_request_duration_seconds API request latency`,
	} {
		n.add(l)
	}
	if n.assignments != 1547 || n.events != 300 {
		t.Fatalf("counted assignments %v, events %v; want 1547 and 300", n.assignments, n.events)
	}
}
