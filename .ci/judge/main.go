// Command judge runs a go test command and, while it runs, measures how
// long the whole machine stands still: a goroutine of this small, mostly
// sleeping process asks to wake every 5 ms and records how late it woke.
// When the command fails, a failed test is judged again, alone, only if
// the machine stood still for at least -stall while its package ran (go
// test prints a package's output when the package ends, with the time it
// took: the judge notes when each line arrived); then it must pass that
// second time. A failure that is not a test's (a build error, a panic, a
// timeout), or a test of a package during which the machine ran, is judged
// as it is.
//
//	go run ./.ci/judge [-stall 250ms] -- go test FLAGS... PACKAGES...
//
// Why: CI's run of 2026-12-03 failed four tests in three packages at one
// instant, when every test process (each one's lag meter) and its
// redis-servers stood still about 0.8 s and locks of 1 s expired; no
// watchdog in a process that does not run can renew (README's "What no
// watchdog can do"). The tests judge the stalls they measure themselves
// where they can (lagmeter.Meter.NotJudged); this covers the rest, and
// says so in CI's log. Until 2026-12-03 a stall anywhere in the run
// excused every failed test, even one whose package ran minutes later.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	stall := flag.Duration("stall", 250*time.Millisecond, "the least time the machine must have stood still while a failed test's package ran for that test to be run again")
	flag.Parse()
	args := flag.Args()
	if len(args) < 2 || args[0] != "go" || args[1] != "test" {
		fmt.Fprintln(os.Stderr, "judge: want a go test command after --, e.g. judge -- go test -race ./...")
		os.Exit(2)
	}
	w := startWatch(5*time.Millisecond, *stall)
	start := time.Now()
	out, err := run(args)
	worst, stalls := w.stop()
	if err == nil {
		fmt.Printf("judge: passed; the machine stood still for at most %v while the tests ran\n", worst.Round(time.Millisecond))
		return
	}
	fails, why := failedTests(out, start)
	if why != "" {
		fmt.Printf("\njudge: %s: judged as it is\n", why)
		os.Exit(1)
	}
	var again []failure
	stands := 0
	for _, f := range fails {
		s, ok := stallDuring(stalls, f)
		if !ok {
			stands++
			fmt.Printf("\njudge: %s (%s) failed while the machine ran (its package ran from +%v to +%v; it stood still for at most %v in the whole run, at least %v needed while the package ran): judged as it is\n",
				f.test, f.pkg, f.from.Sub(start).Round(time.Second), f.to.Sub(start).Round(time.Second), worst.Round(time.Millisecond), *stall)
			continue
		}
		fmt.Printf("\njudge: NOT JUDGED: %s (%s) failed after the machine stood still for %v at +%v, while its package ran (from +%v to +%v; the processes that renew locks and the servers that hold them did not run); it is run again alone and must pass\n",
			f.test, f.pkg, s.dur.Round(time.Millisecond), s.at.Sub(start).Round(time.Second), f.from.Sub(start).Round(time.Second), f.to.Sub(start).Round(time.Second))
		again = append(again, f)
	}
	if stands > 0 {
		fmt.Printf("\njudge: %d of %d failed tests failed while the machine ran\n", stands, len(fails))
		os.Exit(1)
	}
	flags, _ := split(args[2:])
	failed := 0
	for _, f := range again {
		cmd := append([]string{"go", "test"}, flags...)
		cmd = append(cmd, "-run", "^"+regexp.QuoteMeta(f.test)+"$", f.pkg)
		fmt.Printf("\njudge: %s\n", strings.Join(cmd, " "))
		if _, err := run(cmd); err != nil {
			failed++
		}
	}
	if failed > 0 {
		fmt.Printf("\njudge: %d of %d tests failed again alone\n", failed, len(again))
		os.Exit(1)
	}
	fmt.Printf("\njudge: the %d tests passed alone\n", len(again))
}

// A line is one line of the command's output and when it arrived.
type line struct {
	at   time.Time
	text string
}

// run runs args, its output streamed to this process's and returned line
// by line, each with the time it arrived.
func run(args []string) ([]line, error) {
	cmd := exec.Command(args[0], args[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Stdin = nil
	var lines []line
	read := make(chan struct{})
	go func() {
		defer close(read)
		br := bufio.NewReaderSize(pr, 1<<16)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				os.Stdout.WriteString(s)
				lines = append(lines, line{time.Now(), strings.TrimSuffix(s, "\n")})
			}
			if err != nil {
				return
			}
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-read
	return lines, err
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

// A failure is a top-level test that failed, with its package and when
// the package ran: from its end (its FAIL line) back by the time go test
// gives it, and a second more.
type failure struct {
	test, pkg string
	from, to  time.Time
}

var (
	topFail = regexp.MustCompile(`^--- FAIL: (\S+) `)
	pkgFail = regexp.MustCompile(`^FAIL\t(\S+)(?:\t([0-9.]+)s)?`)
	pkgEnd  = regexp.MustCompile(`^(ok  |\?   )\t(\S+)`)
)

// failedTests reads go test's output (each package's, whole, one after
// the other) for the top-level tests that failed, with their packages and
// when those ran (a package whose FAIL line gives no time ran, as far as
// the judge can tell, from start). It says why not (why != "") when a
// package failed with no test failed in it, or its output shows a panic
// or a timeout: those are judged as they are.
func failedTests(out []line, start time.Time) (fails []failure, why string) {
	var pending []string
	broken := false
	for _, l := range out {
		text := l.text
		if m := topFail.FindStringSubmatch(text); m != nil {
			pending = append(pending, m[1])
			continue
		}
		if strings.HasPrefix(text, "panic: ") || strings.Contains(text, "test timed out after") || strings.HasPrefix(text, "fatal error: ") || strings.HasPrefix(text, "WARNING: DATA RACE") {
			broken = true
			continue
		}
		if m := pkgFail.FindStringSubmatch(text); m != nil {
			switch {
			case broken:
				return nil, fmt.Sprintf("package %s failed with a panic, a data race, a fatal error or a timeout", m[1])
			case len(pending) == 0:
				return nil, fmt.Sprintf("package %s failed with no test failed (a build or set-up error)", m[1])
			}
			from := start
			if secs, err := strconv.ParseFloat(m[2], 64); err == nil {
				from = l.at.Add(-time.Duration(secs*float64(time.Second)) - time.Second)
				if from.Before(start) {
					from = start
				}
			}
			for _, t := range pending {
				fails = append(fails, failure{t, m[1], from, l.at})
			}
			pending, broken = nil, false
			continue
		}
		if pkgEnd.MatchString(text) {
			pending, broken = nil, false
		}
	}
	if len(fails) == 0 {
		return nil, "the command failed with no test failed"
	}
	return fails, ""
}

// A stall is a time the machine stood still: when it began and how long.
type stall struct {
	at  time.Time
	dur time.Duration
}

// stallDuring returns the longest of stalls that overlaps the time f's
// package ran, and whether there is one.
func stallDuring(stalls []stall, f failure) (stall, bool) {
	var best stall
	for _, s := range stalls {
		if s.at.Add(s.dur).Before(f.from) || s.at.After(f.to) {
			continue
		}
		if s.dur > best.dur {
			best = s
		}
	}
	return best, best.dur > 0
}

// watch records how late a goroutine that asks to wake every tick woke:
// how long this process, and so the machine it runs on, stood still. It
// keeps the longest lateness, and every one of at least min.
type watch struct {
	mu     sync.Mutex
	min    time.Duration
	worst  time.Duration
	stalls []stall
	done   chan struct{}
	ended  chan struct{}
}

func startWatch(tick, min time.Duration) *watch {
	w := &watch{min: min, done: make(chan struct{}), ended: make(chan struct{})}
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
					w.worst = max(w.worst, late)
					if late >= w.min {
						w.stalls = append(w.stalls, stall{now.Add(-late), late})
					}
					w.mu.Unlock()
				}
				last = now
			}
		}
	}()
	return w
}

// stop ends the watch and returns the longest stall, and every stall of
// at least its min.
func (w *watch) stop() (time.Duration, []stall) {
	close(w.done)
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst, w.stalls
}
