package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
)

// servingLine is what the demo prints when -http serves; its group is the
// address.
var servingLine = regexp.MustCompile(`http: serving http://([^/\s]+)/metrics`)

// get returns the status and body of a GET of url, with a client that
// keeps no connection open.
func get(t testing.TB, url string) (int, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue returns the value of the sample named name (labels
// included, as the text format writes them) in a scrape.
func metricValue(scrape, name string) (float64, bool) {
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// With -http the demo serves /metrics and the debug page while it runs,
// and stops serving when it ends.
func TestRunServesHTTP(t *testing.T) {
	t.Parallel()
	var out harness.LockedBuffer
	cfg := shortConfig(&out)
	cfg.httpAddr = "127.0.0.1:0"
	type ran struct {
		res result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := run(context.Background(), cfg)
		done <- ran{res, err}
	}()

	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := servingLine.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		r := <-done
		t.Fatalf("no %q line in the output (run = %v):\n%s", servingLine, r.err, out.String())
	}

	// Renewals grow from one scrape to a later one.
	var first float64
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, body, err := get(t, "http://"+addr+"/metrics")
		if err != nil || status != http.StatusOK {
			t.Fatalf("GET /metrics = %d, %v", status, err)
		}
		for _, name := range []string{"lockwatch_locks_tracked", "lockwatch_renew_errors_total",
			`lockwatch_losses_total{reason="gone"}`, `lockwatch_losses_total{reason="quorum"}`} {
			if _, ok := metricValue(body, name); !ok {
				t.Errorf("/metrics has no sample %s:\n%s", name, body)
			}
		}
		if !strings.Contains(body, "# TYPE lockwatch_renewals_total counter") {
			t.Errorf("/metrics lacks the type of lockwatch_renewals_total:\n%s", body)
		}
		n, ok := metricValue(body, "lockwatch_renewals_total")
		if !ok {
			t.Fatalf("/metrics has no lockwatch_renewals_total:\n%s", body)
		}
		if first == 0 {
			first = n
		} else if n > first {
			// Renewed: an endpoint has been seen. Before the demo's first
			// lock there is none to report (CI run 124, the newest Go
			// beside two CPU burners: the first scrape came before it).
			if !strings.Contains(body, "lockwatch_endpoint_down{endpoint=") {
				t.Errorf("/metrics lacks lockwatch_endpoint_down after renewals:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockwatch_renewals_total stayed at %v for 2s", first)
		}
	}

	status, body, err := get(t, "http://"+addr+"/debug/lockwatch?format=json")
	var page struct {
		Locks []struct {
			Key string `json:"key"`
		} `json:"locks"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &page) != nil || len(page.Locks) == 0 {
		t.Errorf("GET /debug/lockwatch?format=json = %d, %v, %d locks:\n%s", status, err, len(page.Locks), body)
	}

	r := <-done
	checkHeldRun(t, r.res, r.err, out.String())
	if _, _, err := get(t, "http://"+addr+"/metrics"); err == nil {
		t.Error("GET /metrics after the demo ended succeeded, want the server closed")
	}
}

func TestParseFlagsHTTP(t *testing.T) {
	cfg, err := parseFlags([]string{"-http", "127.0.0.1:9464"}, io.Discard)
	if err != nil || cfg.httpAddr != "127.0.0.1:9464" {
		t.Errorf("parseFlags(-http 127.0.0.1:9464) = %q, %v; want the address, nil", cfg.httpAddr, err)
	}
	if cfg, _ := parseFlags(nil, io.Discard); cfg.httpAddr != "" {
		t.Errorf("parseFlags() httpAddr = %q, want none", cfg.httpAddr)
	}
}
