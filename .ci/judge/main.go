// Command judge runs a go test command and, while it runs, measures how
// long the whole machine stands still: a goroutine of this small, mostly
// sleeping process asks to wake every 5 ms and records how late it woke.
// When the command fails, the failed tests are judged again, each alone,
// only if the machine stood still for at least -stall while it ran; then
// every one must pass that second time. A failure that is not a test's (a
// build error, a panic, a timeout) or that came while the machine ran is
// judged as it is.
//
//	go run ./.ci/judge [-stall 250ms] -- go test FLAGS... PACKAGES...
//
// Why: CI's run of 2026-12-03 failed four tests in three packages at one
// instant, when every test process (each one's lag meter) and its
// redis-servers stood still about 0.8 s and locks of 1 s expired; no
// watchdog in a process that does not run can renew (README's "What no
// watchdog can do"). The tests judge the stalls they measure themselves
// where they can (lagmeter.Meter.NotJudged); this covers the rest, and
// says so in CI's log.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

func main() {
	stall := flag.Duration("stall", 250*time.Millisecond, "the least time the machine must have stood still for failed tests to be run again")
	flag.Parse()
	args := flag.Args()
	if len(args) < 2 || args[0] != "go" || args[1] != "test" {
		fmt.Fprintln(os.Stderr, "judge: want a go test command after --, e.g. judge -- go test -race ./...")
		os.Exit(2)
	}
	w := startWatch(5 * time.Millisecond)
	start := time.Now()
	out, err := run(args)
	worst, at := w.stop()
	if err == nil {
		fmt.Printf("judge: passed; the machine stood still for at most %v while the tests ran\n", worst.Round(time.Millisecond))
		return
	}
	fails, why := failedTests(out)
	switch {
	case why != "":
		fmt.Printf("\njudge: %s: judged as it is\n", why)
		os.Exit(1)
	case worst < *stall:
		fmt.Printf("\njudge: %d tests failed; the machine stood still for at most %v while they ran (less than %v): judged as they are\n", len(fails), worst.Round(time.Millisecond), *stall)
		os.Exit(1)
	}
	fmt.Printf("\njudge: NOT JUDGED: %d tests failed while the machine stood still for %v (at +%v of the run's %v; the processes that renew locks and the servers that hold them did not run); each is run again alone and must pass\n",
		len(fails), worst.Round(time.Millisecond), at.Sub(start).Round(time.Second), time.Since(start).Round(time.Second))
	flags, _ := split(args[2:])
	failed := 0
	for _, f := range fails {
		again := append([]string{"go", "test"}, flags...)
		again = append(again, "-run", "^"+regexp.QuoteMeta(f.test)+"$", f.pkg)
		fmt.Printf("\njudge: %s\n", strings.Join(again, " "))
		if _, err := run(again); err != nil {
			failed++
		}
	}
	if failed > 0 {
		fmt.Printf("\njudge: %d of %d tests failed again alone\n", failed, len(fails))
		os.Exit(1)
	}
	fmt.Printf("\njudge: the %d tests passed alone\n", len(fails))
}

// run runs args, its output streamed to this process's and returned.
func run(args []string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	var b strings.Builder
	out := io.MultiWriter(os.Stdout, &b)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Stdin = nil
	err := cmd.Run()
	return b.String(), err
}

// split separates a go test command's flags from its packages: a package
// is an argument that does not start with "-" and is not a flag's value
// (this project's commands give every value with "=", or as -run's or
// -timeout's next argument).
func split(args []string) (flags, pkgs []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-run" || a == "-timeout" || a == "-skip" || a == "-p" || a == "-count":
			if a != "-run" && a != "-skip" && i+1 < len(args) {
				flags = append(flags, a, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-run=") || strings.HasPrefix(a, "-skip="):
			// replaced by the failed test's own -run
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
		default:
			pkgs = append(pkgs, a)
		}
	}
	return flags, pkgs
}

type failure struct{ test, pkg string }

var (
	topFail = regexp.MustCompile(`^--- FAIL: (\S+) `)
	pkgFail = regexp.MustCompile(`^FAIL\t(\S+)(\t| )`)
	pkgEnd  = regexp.MustCompile(`^(ok  |\?   )\t(\S+)`)
)

// failedTests reads go test's output (each package's, whole, one after
// the other) for the top-level tests that failed, with their packages. It
// says why not (why != "") when a package failed with no test failed in
// it, or its output shows a panic or a timeout: those are judged as they
// are.
func failedTests(out string) (fails []failure, why string) {
	var pending []string
	broken := false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if m := topFail.FindStringSubmatch(line); m != nil {
			pending = append(pending, m[1])
			continue
		}
		if strings.HasPrefix(line, "panic: ") || strings.Contains(line, "test timed out after") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "WARNING: DATA RACE") {
			broken = true
			continue
		}
		if m := pkgFail.FindStringSubmatch(line); m != nil {
			switch {
			case broken:
				return nil, fmt.Sprintf("package %s failed with a panic, a data race, a fatal error or a timeout", m[1])
			case len(pending) == 0:
				return nil, fmt.Sprintf("package %s failed with no test failed (a build or set-up error)", m[1])
			}
			for _, t := range pending {
				fails = append(fails, failure{t, m[1]})
			}
			pending, broken = nil, false
			continue
		}
		if pkgEnd.MatchString(line) {
			pending, broken = nil, false
		}
	}
	if len(fails) == 0 {
		return nil, "the command failed with no test failed"
	}
	return fails, ""
}

// watch records the longest lateness of a goroutine that asks to wake every
// tick: how long this process, and so the machine it runs on, stood still.
type watch struct {
	mu    sync.Mutex
	worst time.Duration
	at    time.Time
	done  chan struct{}
	ended chan struct{}
}

func startWatch(tick time.Duration) *watch {
	w := &watch{done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
				now := time.Now()
				if late := now.Sub(last) - tick; late > 0 {
					w.mu.Lock()
					if late > w.worst {
						w.worst, w.at = late, now.Add(-late)
					}
					w.mu.Unlock()
				}
				last = now
			}
		}
	}()
	return w
}

// stop ends the watch and returns the longest stall and when it began.
func (w *watch) stop() (time.Duration, time.Time) {
	close(w.done)
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst, w.at
}
