package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// A scenario whose failure may be a crash or a hang of the whole process
// (a user callback's panic on a watchdog goroutine, a lock left held) runs
// in a child process, the test binary re-executed for that one test: a
// crash then fails that test, with its output, instead of ending every
// other test of the package.
const (
	// childEnv names the test a child process runs.
	childEnv = "LOCKWATCH_OWNERSHIP_CHILD"
	// childAddrEnv is the address of the redis-server the parent started.
	childAddrEnv = "LOCKWATCH_OWNERSHIP_ADDR"
	// childTimeout is the child's -test.timeout: a hang ends with the
	// testing package's goroutine dump.
	childTimeout = 25 * time.Second
	// childKill is when the parent kills a child that is still running.
	childKill = childTimeout + 10*time.Second
)

// inChild runs body in a child process, against a redis-server the parent
// starts (and stops, whatever happens to the child), and fails t with the
// child's output when the child fails, crashes or hangs. In the child,
// inChild calls body directly.
func inChild(t *testing.T, body func(t *testing.T, addr string)) {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		body(t, os.Getenv(childAddrEnv))
		return
	}
	srv := testredis.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), childKill)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1", "-test.v", "-test.timeout="+childTimeout.String())
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), childAddrEnv+"="+srv.Addr)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Millisecond)
	text := string(out)
	var exit *exec.ExitError
	switch {
	case err == nil && strings.Contains(text, "--- PASS: "+t.Name()):
		if logs := logLines(text, 20); logs != "" {
			t.Logf("child process passed in %v; its log:\n%s", took, logs)
		} else {
			t.Logf("child process passed in %v", took)
		}
	case err == nil:
		t.Errorf("child process exited 0 in %v but did not pass %s, want it run and passed; output:\n%s", took, t.Name(), excerpt(text))
	case ctx.Err() != nil:
		t.Errorf("child process killed after %v: it hung, want it to finish; output:\n%s", took, excerpt(text))
	case strings.Contains(text, "panic: test timed out"):
		t.Errorf("child process hung: -test.timeout=%v ended it after %v, want it to finish; output:\n%s", childTimeout, took, excerpt(text))
	case strings.Contains(text, "\npanic: ") || strings.HasPrefix(text, "panic: "):
		t.Errorf("child process crashed (%v) after %v, want no crash; output:\n%s", err, took, excerpt(text))
	case errors.As(err, &exit):
		t.Errorf("child process failed (%v) after %v, want it to pass; output:\n%s", err, took, excerpt(text))
	default:
		t.Fatalf("run child process %s: %v", os.Args[0], err)
	}
}

// runPattern is the -test.run pattern that selects exactly the test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// logLines returns the test log lines of out (file:line: message, and
// their continuation lines), at most n.
func logLines(out string, n int) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "--- ") {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = append(keep[:n], fmt.Sprintf("    ... %d more lines", len(keep)-n))
	}
	return strings.Join(keep, "\n")
}

// excerpt returns what tells why a child failed: its test log, and the
// first lines of a panic or a timeout's dump, with the goroutine that
// panicked and the goroutines blocked in lockwatch.
func excerpt(out string) string {
	const maxLines = 120
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var keep []string
	i := 0
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "panic: "); i++ {
		if !strings.HasPrefix(lines[i], "=== ") {
			keep = append(keep, lines[i])
		}
	}
	if i < len(lines) {
		// The panic's message and the first goroutine (the panicking one,
		// or the timeout's).
		end := i
		for end < len(lines) && (end < i+3 || lines[end] != "") {
			end++
		}
		keep = append(keep, lines[i:end]...)
		keep = append(keep, lockwatchGoroutines(strings.Join(lines[end:], "\n"))...)
	}
	if len(keep) > maxLines {
		keep = append(keep[:maxLines], fmt.Sprintf("... %d more lines", len(keep)-maxLines))
	}
	return strings.Join(keep, "\n")
}

// lockwatchGoroutines returns, in short, the goroutines of a stack dump
// (runtime.Stack, or a panic's) that run lockwatch's own code (registry,
// watchdog, table), leaving out the lanes' loops idle in a select.
func lockwatchGoroutines(dump string) []string {
	var keep []string
	for _, g := range strings.Split(dump, "\n\n") {
		g = strings.TrimSpace(g)
		ours := strings.Contains(g, "lockwatch/registry.") || strings.Contains(g, "lockwatch/internal/table.") || strings.Contains(g, "lockwatch/watchdog.")
		idle := strings.Contains(g, " [select") && !strings.Contains(g, "lockwatch/registry.")
		if !ours || idle {
			continue
		}
		gl := strings.Split(g, "\n")
		if len(gl) > 30 {
			gl = append(gl[:30], "\t...")
		}
		keep = append(keep, "")
		keep = append(keep, gl...)
	}
	return keep
}

// hungStacks returns this process's goroutines that run lockwatch code,
// for the message of a call that hangs.
func hungStacks() string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	gs := lockwatchGoroutines(string(buf[:n]))
	if len(gs) > 100 {
		gs = append(gs[:100], "...")
	}
	return strings.Join(gs, "\n")
}
