package lockwatchprom_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockwatch/lockwatch/extra/lockwatchprom"
)

// The files of monitoring/: the alert rules, their promtool unit tests and
// the Grafana dashboard.
const (
	alertsFile     = "monitoring/alerts.yml"
	alertsTestFile = "monitoring/alerts_test.yml"
	dashboardFile  = "monitoring/dashboard.json"
)

// promtool returns the path of promtool (Debian package prometheus). It
// skips t when there is none, or fails it when LOCKWATCH_REQUIRE_REDIS=1
// (as CI sets) says every tool the tests use must be there.
func promtool(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("LOCKWATCH_REQUIRE_REDIS") == "1" {
			t.Fatalf("promtool not found (LOCKWATCH_REQUIRE_REDIS=1): %v; install the Debian package prometheus", err)
		}
		t.Skipf("promtool not found (%v): install the Debian package prometheus", err)
	}
	return path
}

// runPromtool runs promtool with args in dir and fails t with its output
// when it fails.
func runPromtool(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The alert rules pass promtool's checks and their unit tests.
func TestAlertRules(t *testing.T) {
	runPromtool(t, "monitoring", "check", "rules", filepath.Base(alertsFile))
	runPromtool(t, "monitoring", "test", "rules", filepath.Base(alertsTestFile))
}

// Every alert of alerts.yml has unit tests in alerts_test.yml.
func TestAlertsTested(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tested := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*alertname:\s*(\w+)`).FindAllStringSubmatch(read(alertsTestFile), -1) {
		tested[m[1]] = true
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert:\s*(\w+)`).FindAllStringSubmatch(read(alertsFile), -1)
	if len(alerts) == 0 {
		t.Fatalf("%s has no alert", alertsFile)
	}
	for _, m := range alerts {
		if !tested[m[1]] {
			t.Errorf("%s: alert %s has no test in %s", alertsFile, m[1], alertsTestFile)
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t testing.TB) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars are the dashboard's variables, replaced by values that make
// its queries plain PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")

// Every query of the dashboard is valid PromQL: promtool checks them as
// recording rules.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q, %d panels, want a uid and panels", dashboardFile, d.UID, len(d.Panels))
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for i, q := range p.Targets {
			expr, err := json.Marshal(grafanaVars.Replace(q.Expr)) // a JSON string is a YAML string
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d:query%d\n        expr: %s\n", p.ID, i, expr)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard.yml")
}

// metricName matches the names of lockwatch's metrics in a query.
var metricName = regexp.MustCompile(`\blockwatch_[a-z_]+`)

// The alert rules and the dashboard use only metrics the collector
// exposes.
func TestMonitoringNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(lockwatchprom.NewCollector("lockwatch", "", newWatchdog(t)))
	families := gather(t, reg)
	names := map[string]bool{}
	for name, mf := range families {
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	for _, file := range []string{alertsFile, alertsTestFile, dashboardFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, n := range metricName.FindAllString(string(b), -1) {
			used[n] = true
		}
		if len(used) == 0 {
			t.Errorf("%s names no lockwatch metric", file)
		}
		for _, n := range slices.Sorted(maps.Keys(used)) {
			if !names[n] {
				t.Errorf("%s uses %s, which the collector does not expose (it exposes %v)", file, n, slices.Sorted(maps.Keys(families)))
			}
		}
	}
}
