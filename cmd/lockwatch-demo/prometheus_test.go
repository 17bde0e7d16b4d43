package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alertRules are the alert rules extra/lockwatchprom ships, loaded into the
// Prometheus server of TestPrometheusScrape when the tree has them (a copy
// of this module alone does not).
const alertRules = "../../extra/lockwatchprom/monitoring/alerts.yml"

// lookPath returns the path of the program name. It skips t when there is
// none, or fails it when LOCKWATCH_REQUIRE_REDIS=1 (as CI sets) says every
// server the tests use must be there.
func lookPath(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("LOCKWATCH_REQUIRE_REDIS") == "1" {
			t.Fatalf("%s not found (LOCKWATCH_REQUIRE_REDIS=1): %v; install the Debian package %s", name, err, pkg)
		}
		t.Skipf("%s not found (%v): install the Debian package %s", name, err, pkg)
	}
	return path
}

// started is a process a test started, with its output in a file.
type started struct {
	cmd *exec.Cmd
	log string
}

// start starts the program path with args, its output going to a file in
// dir, and stops it by its pid when t ends.
func start(t *testing.T, dir, name, path string, args ...string) *started {
	t.Helper()
	log := filepath.Join(dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &started{cmd: cmd, log: log}
	t.Cleanup(p.stop)
	return p
}

// stop ends the process, by its pid: SIGTERM, then SIGKILL after 5s.
func (p *started) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	timer := time.AfterFunc(5*time.Second, func() { _ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL) })
	_ = p.cmd.Wait()
	timer.Stop()
}

// output returns what the process printed so far.
func (p *started) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promQuery runs an instant query over the HTTP API of the Prometheus
// server at addr and returns the value of each series by its labels.
func promQuery(t *testing.T, addr, query string) (map[string]float64, error) {
	t.Helper()
	status, body, err := get(t, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || status != 200 || r.Status != "success" {
		return nil, fmt.Errorf("query %s: status %d, %v: %s", query, status, err, body)
	}
	got := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %v", query, v, err)
		}
		got[fmt.Sprint(s.Metric)] = f
	}
	return got, nil
}

// A real Prometheus server scrapes a running demo (lockwatch-demo -http)
// and sees its renewals grow; the alert rules of extra/lockwatchprom load
// and evaluate on what it scraped, and none fires.
func TestPrometheusScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the demo and runs a Prometheus server against it for 10 s (.ci/run runs it in a step of its own, and in the -race suite); skipped with -short")
	}
	prometheus := lookPath(t, "prometheus", "prometheus")
	goTool := lookPath(t, "go", "golang")
	dir := t.TempDir()

	// The demo, as a process of its own, serving on a port it chooses.
	bin := filepath.Join(dir, "lockwatch-demo")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	demo := start(t, dir, "demo", bin, "-http", "127.0.0.1:0", "-duration", "60s")
	var target string
	for deadline := time.Now().Add(10 * time.Second); target == ""; time.Sleep(50 * time.Millisecond) {
		if m := servingLine.FindStringSubmatch(demo.output()); m != nil {
			target = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the demo printed no %q line in 10s:\n%s", servingLine, demo.output())
		}
	}

	// Prometheus, scraping it every second, with the alert rules.
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: demo
    static_configs:
      - targets: [%q]
`, target)
	rules, err := os.ReadFile(alertRules)
	switch {
	case err == nil:
		if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
			t.Fatal(err)
		}
		config += "rule_files: [alerts.yml]\n"
	case os.IsNotExist(err):
		t.Logf("no %s: the alert rules are not loaded", alertRules)
	default:
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var prom *started
	var addr string
	for attempt := 1; prom == nil; attempt++ {
		addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		p := start(t, dir, fmt.Sprintf("prometheus-%d", attempt), prometheus,
			"--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address="+addr,
			"--log.level=warn")
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if status, _, err := get(t, "http://"+addr+"/-/ready"); err == nil && status == 200 {
				prom = p
				break
			}
			if p.cmd.ProcessState != nil || syscall.Kill(p.cmd.Process.Pid, 0) != nil {
				break // it exited: its port may have been taken meanwhile
			}
		}
		if prom == nil {
			p.stop()
			if attempt == 3 {
				t.Fatalf("prometheus did not become ready on %s:\n%s", addr, p.output())
			}
		}
	}
	t.Logf("prometheus on %s scrapes the demo on %s", addr, target)

	// Renewals grow from one query to a later one.
	query := `lockwatch_renewals_total{job="demo"}`
	var first, last float64
	deadline := time.Now().Add(30 * time.Second)
	for ; ; time.Sleep(500 * time.Millisecond) {
		got, err := promQuery(t, addr, query)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 1 {
			t.Fatalf("%s = %v, want one series", query, got)
		}
		for _, v := range got {
			if first == 0 {
				first = v
			}
			last = v
		}
		if first > 0 && last > first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s went from %v to %v in 30s, want it to grow\nprometheus:\n%s\ndemo:\n%s", query, first, last, prom.output(), demo.output())
		}
	}
	t.Logf("%s grew from %v to %v", query, first, last)
	for _, q := range []string{`up{job="demo"}`, `lockwatch_locks_tracked{job="demo"}`, `increase(lockwatch_renewals_total{job="demo"}[10s])`} {
		got, err := promQuery(t, addr, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Errorf("%s = %v, want one series", q, got)
		}
		for _, v := range got {
			if v <= 0 {
				t.Errorf("%s = %v, want more than 0", q, v)
			}
		}
	}

	// The alert rules were evaluated on the demo's series without error,
	// and none fires: the demo loses no lock and its Redis is up.
	if len(rules) > 0 {
		checkRules(t, addr)
	}

	// The debug page is served beside /metrics.
	if status, body, err := get(t, "http://"+target+"/debug/lockwatch"); err != nil || status != 200 || !strings.Contains(body, "<html") {
		t.Errorf("GET /debug/lockwatch = %d, %v:\n%.300s", status, err, body)
	}
}

// checkRules checks, over the HTTP API of the Prometheus server at addr,
// that every alert rule has been evaluated without error and none fires.
func checkRules(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, body, err := get(t, "http://"+addr+"/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name           string `json:"name"`
						Health         string `json:"health"`
						LastError      string `json:"lastError"`
						State          string `json:"state"`
						LastEvaluation string `json:"lastEvaluation"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/api/v1/rules: %v: %s", err, body)
		}
		var pending []string
		n := 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				n++
				switch {
				case rule.Health == "err":
					t.Errorf("rule %s: %s", rule.Name, rule.LastError)
				case rule.Health != "ok":
					pending = append(pending, rule.Name+" ("+rule.Health+")")
				case rule.State != "inactive":
					t.Errorf("rule %s is %s on the demo, want inactive", rule.Name, rule.State)
				}
			}
		}
		if n == 0 {
			t.Fatalf("/api/v1/rules has no rule: %s", body)
		}
		if len(pending) == 0 || t.Failed() {
			t.Logf("%d alert rules evaluated on the demo's series, none firing", n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules not evaluated in 10s: %v", pending)
		}
	}
}
