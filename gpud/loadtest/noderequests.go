package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// The node routes whose requests the report counts per start (the
// controller's gpud_api_request_duration_seconds, by route).
const (
	routeAssignments = "GET /v1/nodes/{name}/assignments"
	// Each answer on a node's assignments watch stream: server.WatchAnswerRoute
	// (the harness does not import the controller's packages).
	routeWatchAnswer = "GET /v1/nodes/{name}/assignments?watch=1 answer"
	routeEvents      = "POST /v1/nodes/{name}/events"
)

// nodeRequests are the controller's count of node requests answered so
// far, by route (its /metrics): assignments counts long polls' answers and
// watch streams' answers (a stream's request, at its end, counts too).
type nodeRequests struct {
	assignments, events float64
}

// readNodeRequests reads the controller's /metrics (public on TCP, as for
// a Prometheus scraper) and sums the node routes' requests over their
// status codes.
func readNodeRequests(ctx context.Context, cl *api.Client, addr string) (nodeRequests, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return nodeRequests{}, err
	}
	resp, err := cl.HTTPClient().Do(req)
	if err != nil {
		return nodeRequests{}, fmt.Errorf("loadtest: read the controller's /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nodeRequests{}, fmt.Errorf("loadtest: read the controller's /metrics: %s", resp.Status)
	}
	var out nodeRequests
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		out.add(sc.Text())
	}
	return out, sc.Err()
}

// add counts one line of the exposition format when it is a node route's
// request count.
func (n *nodeRequests) add(line string) {
	rest, ok := strings.CutPrefix(line, "gpud_api_request_duration_seconds_count{")
	if !ok {
		return
	}
	labels, val, ok := strings.Cut(rest, "} ")
	if !ok {
		return
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
	if err != nil {
		return
	}
	switch {
	case strings.Contains(labels, `route="`+routeAssignments+`"`), strings.Contains(labels, `route="`+routeWatchAnswer+`"`):
		n.assignments += v
	case strings.Contains(labels, `route="`+routeEvents+`"`):
		n.events += v
	}
}
