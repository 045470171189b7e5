// Command restload times REST requests for scripts/bench-rest-vs.sh: -n
// requests of -method -url from -c concurrent clients, each with the
// -H headers and -body; it prints the p50 and p99 latency in ms and the
// requests per second. Any answer but -want ends it with an error, so a
// refused or failed request is never counted as work done.
package main

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "URL")
	method := flag.String("method", "GET", "method")
	var hdrs []string
	flag.Func("H", "header Name: value (repeatable)", func(v string) error { hdrs = append(hdrs, v); return nil })
	body := flag.String("body", "", "request body")
	n := flag.Int("n", 20, "requests")
	c := flag.Int("c", 1, "concurrent clients")
	want := flag.Int("want", 200, "status every answer must have")
	flag.Parse()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: *c} //nolint:gosec // a benchmark of loopback servers with throwaway certificates
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	do := func() (time.Duration, error) {
		req, err := http.NewRequest(*method, *url, bytes.NewReader([]byte(*body)))
		if err != nil {
			return 0, err
		}
		for _, h := range hdrs {
			name, value, _ := strings.Cut(h, ":")
			req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		if *body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != *want {
			return 0, fmt.Errorf("%s %s: %d %.300s", *method, *url, resp.StatusCode, b)
		}
		return d, nil
	}
	if _, err := do(); err != nil { // warm the connection
		fmt.Fprintln(os.Stderr, "restload:", err)
		os.Exit(1)
	}
	var (
		next   atomic.Int64
		mu     sync.Mutex
		ds     []time.Duration
		failed atomic.Value
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range *c {
		wg.Go(func() {
			for next.Add(1) <= int64(*n) {
				d, err := do()
				if err != nil {
					failed.Store(err)
					return
				}
				mu.Lock()
				ds = append(ds, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, "restload:", err)
		os.Exit(1)
	}
	slices.Sort(ds)
	p := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	fmt.Printf("p50 %.1f ms  p99 %.1f ms  %.0f/s\n", p(0.5), p(0.99), float64(len(ds))/el.Seconds())
}
