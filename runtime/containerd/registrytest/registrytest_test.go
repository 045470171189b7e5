package registrytest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime/containerd/registrytest"
)

// TestRegistryAuthAndLog: the registry refuses a request without
// credentials, serves a pushed manifest with them, and its access log
// counts what it served.
func TestRegistryAuthAndLog(t *testing.T) {
	u := registrytest.User{Name: "alice", Password: "s3cret"}
	r := registrytest.Start(t, u)
	img := r.AppImage(t, "test/app:1")

	resp, err := r.HTTPClient().Get("https://" + r.Host + "/v2/test/app/manifests/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("manifest without credentials: %s, want 401", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+r.Host+"/v2/test/app/blobs/"+img.ConfigDigest.String(), nil)
	req.SetBasicAuth(u.Name, u.Password)
	resp, err = r.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("config blob with credentials: %s", resp.Status)
	}
	// The registry writes its access line after the response.
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n = r.Requests("GET", img.ConfigDigest.String())
	}
	if n != 1 {
		t.Fatalf("registry log counts %d GETs of the config, want 1\n%s", n, r.Log())
	}
}
