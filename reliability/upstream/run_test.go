package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// runResult is what one run of a suite's test binary gave.
type runResult struct {
	results  map[string]string         // test name (subtests included) -> its last result
	tally    map[string]map[string]int // test name -> result -> how often (-test.count > 1)
	output   map[string][]string       // test name -> its output lines
	elapsedT map[string]float64        // test name -> seconds its last run took
	other    []string                  // output outside any test
	exitErr  error
	elapsed  time.Duration
	refused  string // the watchdog's refusal, if Attach refused
	pexpires int64  // PEXPIRE and PEXPIREAT calls on the runner's redis-server (-1 if unknown)
}

// merge adds the results of o, a later run, to r.
func (r *runResult) merge(o *runResult) {
	for name, res := range o.results {
		r.results[name] = res
	}
	for name, tally := range o.tally {
		if r.tally[name] == nil {
			r.tally[name] = map[string]int{}
		}
		for res, n := range tally {
			r.tally[name][res] += n
		}
	}
	for name, sec := range o.elapsedT {
		r.elapsedT[name] = sec
	}
	for name, lines := range o.output {
		r.output[name] = append(r.output[name], lines...)
	}
	r.other = append(r.other, o.other...)
	r.elapsed += o.elapsed
}

// summary counts the results, and gives the time and, for a suite that
// uses the runner's server, the PEXPIRE and PEXPIREAT calls the server ran (the
// watchdog's renewals and the holders' refreshes).
func (r *runResult) summary(s suite) string {
	var pass, fail, skip, none int
	for _, res := range r.results {
		switch res {
		case resPass:
			pass++
		case resFail:
			fail++
		case resSkip:
			skip++
		default:
			none++
		}
	}
	out := fmt.Sprintf("%d tests: %d passed, %d failed, %d skipped", len(r.results), pass, fail, skip)
	if none > 0 {
		out += fmt.Sprintf(", %d unfinished", none)
	}
	out += " in " + r.elapsed.Round(time.Millisecond).String()
	slowest := ""
	for name, sec := range r.elapsedT {
		if !strings.Contains(name, "/") && (slowest == "" || sec > r.elapsedT[slowest]) {
			slowest = name
		}
	}
	if slowest != "" {
		out += fmt.Sprintf(" (longest: %s, %.2fs)", slowest, r.elapsedT[slowest])
	}
	if s.usesServer && r.pexpires >= 0 {
		out += fmt.Sprintf("; %d PEXPIRE(AT) calls on the server", r.pexpires)
	}
	return out
}

// runBinary runs the suite's test binary once in mode m, with extra
// arguments, through go tool test2json, against a redis-server of its own
// if the suite uses one, and collects the results. The binary times out
// after timeout.
func runBinary(t *testing.T, s suite, m runMode, pkgDir, bin string, timeout time.Duration, extra ...string) *runResult {
	t.Helper()
	addr := ""
	if s.usesServer {
		addr = testredis.Start(t).Addr
	}
	tmp, err := os.MkdirTemp("", "lwup") // short: redsync's servers put Unix sockets here
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	mode := "plain"
	if m.watched {
		mode = "watched"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	args := []string{"tool", "test2json", "-t", "-p", s.lib,
		bin, "-test.v=test2json", "-test.count=1", "-test.timeout=" + timeout.String()}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = pkgDir
	cmd.Env = append(os.Environ(),
		modeEnv+"="+mode,
		scheduleEnv+"="+m.schedule,
		addrEnv+"="+addr,
		"TMPDIR="+tmp,
	)
	// Its own process group, so that servers the tests started die with it
	// if the binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := parseEvents(stdout)
	r.exitErr = cmd.Wait()
	r.elapsed = time.Since(start)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything left of the group
	if stderr.Len() > 0 {
		r.other = append(r.other, stderr.String())
	}
	all := strings.Join(r.other, "")
	if i := strings.Index(all, refusedMarker); i >= 0 {
		line, _, _ := strings.Cut(all[i+len(refusedMarker):], "\n")
		r.refused = strings.TrimSpace(line)
	}
	r.pexpires = -1
	if addr != "" {
		r.pexpires = pexpireCalls(t, addr)
	}
	return r
}

// parseEvents reads go test -json events.
func parseEvents(rd io.Reader) *runResult {
	r := &runResult{results: map[string]string{}, output: map[string][]string{}, tally: map[string]map[string]int{}, elapsedT: map[string]float64{}}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Action  string
			Test    string
			Output  string
			Elapsed float64
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			r.other = append(r.other, sc.Text()+"\n")
			continue
		}
		switch ev.Action {
		case "run":
			if ev.Test != "" {
				r.results[ev.Test] = resNone
			}
		case "pass", "fail", "skip":
			if ev.Test != "" {
				r.results[ev.Test] = ev.Action
				r.elapsedT[ev.Test] = ev.Elapsed
				if r.tally[ev.Test] == nil {
					r.tally[ev.Test] = map[string]int{}
				}
				r.tally[ev.Test][ev.Action]++
			}
		case "output":
			if ev.Test != "" {
				r.output[ev.Test] = append(r.output[ev.Test], ev.Output)
			} else {
				r.other = append(r.other, ev.Output)
			}
		}
	}
	return r
}

var pexpireRE = regexp.MustCompile(`(?m)^cmdstat_pexpire(?:at)?:calls=(\d+)`)

// pexpireCalls returns how many PEXPIRE and PEXPIREAT commands (the renew
// script's on Redis 7) the server at addr ran, scripts' included, or -1 if
// it cannot tell.
func pexpireCalls(t *testing.T, addr string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Logf("INFO commandstats: %v", err)
		return -1
	}
	var n int64
	for _, m := range pexpireRE.FindAllStringSubmatch(info, -1) {
		c, _ := strconv.ParseInt(m[1], 10, 64)
		n += c
	}
	return n
}
