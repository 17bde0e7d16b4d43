package chaos_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// TestChaosCheck runs the checker on made-up journals: it must find what
// it looks for, and classify it by the rule of check_test.go: told no
// later than the other's obtain (explained), told after it (late), never
// told (silent), or the earlier job's process stopped by the test
// (stalled).
func TestChaosCheck(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	at := func(ms int) int64 { return nanos(base.Add(time.Duration(ms) * time.Millisecond)) }
	start := func(proc int, owner, key, value string, ms int) record {
		return record{Kind: recStart, Proc: proc, Owner: owner, Key: key, Lib: "redislock", Value: value, TTL: int64(time.Second), At: at(ms)}
	}
	end := func(proc int, owner string, ms int) record {
		return record{Kind: recEnd, Proc: proc, Owner: owner, At: at(ms)}
	}
	cancelled := func(proc int, owner string, ms, cancelMS int, cause error) record {
		r := end(proc, owner, ms)
		r.CancelAt, r.Cause, r.CauseClass = at(cancelMS), cause.Error(), causeClass(cause)
		return r
	}
	lost := func(proc int, key, value string, ms int, reason error) record {
		return record{Kind: recLost, Proc: proc, Key: key, Value: value, At: at(ms), Cause: reason.Error(), CauseClass: causeClass(reason)}
	}
	stopped := func(proc int, fromMS, toMS int) record {
		return record{Kind: recFault, Proc: proc, Fault: faultWorkerPause, Target: fmt.Sprintf("worker process %d", proc), From: at(fromMS), At: at(toMS)}
	}
	unreachable := &watchdog.UnreachableError{Endpoint: "x", Err: errors.New("i/o timeout")}
	records := []record{
		// k1: back to back, no overlap.
		start(0, "a1", "k1", "v1", 0), end(0, "a1", 1000),
		start(1, "b1", "k1", "v2", 1000), end(1, "b1", 2000),
		// k2: told by its context 50 ms after the other started: late.
		start(0, "a2", "k2", "v1", 0), cancelled(0, "a2", 1060, 1050, watchdog.ErrLockTaken),
		start(1, "b2", "k2", "v2", 1000), end(1, "b2", 2000),
		// k3: never told, within one process: silent.
		start(2, "a3", "k3", "v1", 0), end(2, "a3", 3000),
		start(2, "b3", "k3", "v2", 1000), end(2, "b3", 2000),
		// k4: told by OnLost 300 ms late: late; its context ended with
		// ErrReleased, which tells nothing.
		start(0, "a4", "k4", "v1", 0), cancelled(0, "a4", 1500, 1500, watchdog.ErrReleased),
		lost(0, "k4", "v1", 1300, watchdog.ErrLockGone),
		start(1, "b4", "k4", "v2", 1000), end(1, "b4", 2000),
		// k5: told 300 ms late while its process was not running for
		// 200 ms (the machine's load, by its lag meter): less than it was
		// late: late. k15: told 300 ms late, its process not running for
		// 400 ms from 850 (within a quarter TTL before the other's
		// start): had it run, it would have been on time: stalled. k16:
		// never told, ended 100 ms after the other's start, its process
		// not running for 150 ms then: stalled; k17, the same stall, ended
		// 400 ms after: silent.
		start(1, "a5", "k5", "v1", 0), cancelled(1, "a5", 1310, 1300, unreachable),
		{Kind: recLag, Proc: 1, From: at(1050), At: at(1300), Late: int64(200 * time.Millisecond)},
		start(0, "b5", "k5", "v2", 1000), end(0, "b5", 2000),
		start(7, "a15", "k15", "v1", 0), cancelled(7, "a15", 1310, 1300, unreachable),
		{Kind: recLag, Proc: 7, From: at(850), At: at(1300), Late: int64(400 * time.Millisecond)},
		start(0, "b15", "k15", "v2", 1000), end(0, "b15", 2000),
		start(8, "a16", "k16", "v1", 0), end(8, "a16", 1100),
		start(8, "a17", "k17", "v1", 0), end(8, "a17", 1400),
		{Kind: recLag, Proc: 8, From: at(940), At: at(1090), Late: int64(150 * time.Millisecond)},
		start(0, "b16", "k16", "v2", 1000), end(0, "b16", 2000),
		start(0, "b17", "k17", "v2", 1000), end(0, "b17", 2000),
		// k6: three jobs at once: the first told 10 ms before the second
		// and 40 ms after the third started (explained, then late); the
		// second never told (silent).
		start(0, "a6", "k6", "v1", 0), cancelled(0, "a6", 600, 490, watchdog.ErrLockGone),
		start(1, "b6", "k6", "v2", 500), end(1, "b6", 1500),
		start(2, "c6", "k6", "v3", 450), end(2, "c6", 900),
		// k8: never told, but its process was stopped by the test from 900
		// to 1400, across the other's start: it ended 50 ms after it
		// continued: stalled. k9's job, in the same process, went on 500 ms
		// after it continued: silent.
		start(3, "a8", "k8", "v1", 0), end(3, "a8", 1450),
		stopped(3, 900, 1400),
		start(0, "b8", "k8", "v2", 1000), end(0, "b8", 2000),
		start(3, "a9", "k9", "v1", 0), end(3, "a9", 1900),
		start(0, "b9", "k9", "v2", 1000), end(0, "b9", 2500),
		// k10: told 1 ms before the other obtained, ended 4 ms after it:
		// explained.
		start(4, "a10", "k10", "v1", 0), cancelled(4, "a10", 1004, 999, unreachable),
		start(0, "b10", "k10", "v2", 1000), end(0, "b10", 1500),
		// k11: told 0.5 ms after the other obtained: late.
		start(4, "a11", "k11", "v1", 0), {Kind: recEnd, Proc: 4, Owner: "a11", At: nanos(base.Add(1001 * time.Millisecond)), CancelAt: nanos(base.Add(1000*time.Millisecond + 500*time.Microsecond)), Cause: unreachable.Error(), CauseClass: "unreachable"},
		start(0, "b11", "k11", "v2", 1000), end(0, "b11", 1500),
		// k12: its process was stopped (300 to 800) within a TTL before the
		// other's start (1000) and told 1050: stalled. k13, same process,
		// told 1200 (200 ms after the start, 400 after it continued): late.
		start(5, "a12", "k12", "v1", 0), cancelled(5, "a12", 1060, 1050, unreachable),
		stopped(5, 300, 800),
		start(0, "b12", "k12", "v2", 1000), end(0, "b12", 1500),
		start(5, "a13", "k13", "v1", 0), cancelled(5, "a13", 1210, 1200, unreachable),
		start(0, "b13", "k13", "v2", 1000), end(0, "b13", 1500),
		// A SIGSTOP more than a TTL before the other's start excuses
		// nothing: k14 told 20 ms late is late.
		start(6, "a14", "k14", "v1", 0), cancelled(6, "a14", 2030, 2020, unreachable),
		stopped(6, 100, 600),
		start(0, "b14", "k14", "v2", 2000), end(0, "b14", 2500),
		// An OnLost for a lock no job journaled.
		lost(2, "k99", "v9", 100, watchdog.ErrLockGone),
		// A fault that hit no worker.
		{Kind: recFault, Proc: -1, Fault: faultClientKill, Target: "every node", From: at(100), At: at(110)},
		// k7: a job with no end: a problem, and open to the last time.
		start(2, "a7", "k7", "v1", 0),
		start(1, "b7", "k7", "v2", 2500), end(1, "b7", 2600),
	}
	r := check(records)

	type want struct{ a, b, verdict string }
	var got []want
	for _, o := range r.overlaps {
		got = append(got, want{o.a.owner, o.b.owner, o.verdict})
	}
	wants := []want{
		{"a10", "b10", "explained"},
		{"a11", "b11", "late"},
		{"a12", "b12", "stalled"},
		{"a13", "b13", "late"},
		{"a14", "b14", "late"},
		{"a15", "b15", "stalled"},
		{"a16", "b16", "stalled"},
		{"a17", "b17", "silent"},
		{"a2", "b2", "late"},
		{"a3", "b3", "silent"},
		{"a4", "b4", "late"},
		{"a5", "b5", "late"},
		{"a6", "c6", "late"},
		{"a6", "b6", "explained"},
		{"c6", "b6", "silent"},
		{"a7", "b7", "silent"},
		{"a8", "b8", "stalled"},
		{"a9", "b9", "silent"},
	}
	if fmt.Sprint(got) != fmt.Sprint(wants) {
		t.Errorf("check: overlaps (earlier, later, verdict) =\n%v\nwant\n%v", got, wants)
	}
	for _, o := range r.overlaps {
		switch o.a.owner {
		case "a4":
			if !strings.Contains(o.why, "told late") || !strings.Contains(o.why, "OnLost (gone)") {
				t.Errorf("a4's overlap: why = %q, want told late by OnLost (gone)", o.why)
			}
		case "a5":
			if o.lagSlack != 200*time.Millisecond || !strings.Contains(o.why, "not excused") {
				t.Errorf("a5's overlap: lag = %v, why = %q; want 200ms (less than its 300 ms lateness), reported as not excused", o.lagSlack, o.why)
			}
		case "a15":
			if o.lagSlack != 400*time.Millisecond || !strings.Contains(o.why, "host did not run it") {
				t.Errorf("a15's overlap: lag = %v, why = %q; want 400ms, the host did not run it", o.lagSlack, o.why)
			}
		case "a16":
			if !strings.Contains(o.why, "never told") || o.stop != (lagSpan{}) {
				t.Errorf("a16's overlap: why = %q, stop %v; want never told, no SIGSTOP", o.why, o.stop)
			}
		case "a8":
			if o.stop.from != base.Add(900*time.Millisecond) || !strings.Contains(o.why, "never told") {
				t.Errorf("a8's overlap: stop from %v, why = %q; want the stop at +900ms, never told", o.stop.from, o.why)
			}
		case "a11":
			if !strings.Contains(o.why, "500µs after") {
				t.Errorf("a11's overlap: why = %q, want told 500µs after", o.why)
			}
		case "a3":
			if !o.sameProc() || o.duration() != time.Second {
				t.Errorf("a3's overlap: same process %v, %v long; want true, 1s", o.sameProc(), o.duration())
			}
		}
	}
	if n, m := r.count("silent", true), r.count("silent", false); n != 1 || m != 4 {
		t.Errorf("silent overlaps within one process, across = %d, %d; want 1, 4", n, m)
	}
	if n := r.count("late", true) + r.count("late", false); n != 7 {
		t.Errorf("late overlaps = %d, want 7", n)
	}
	if len(r.problems) != 1 || !strings.Contains(r.problems[0], "a7") {
		t.Errorf("problems = %q, want one about a7", r.problems)
	}
	if r.lostStray != 1 || r.lost["gone"] != 2 {
		t.Errorf("OnLost reports: stray %d, gone %d; want 1, 2", r.lostStray, r.lost["gone"])
	}
	if r.causes["taken"] != 1 || r.causes["released"] != 1 || r.causes["unreachable"] != 7 || r.causes["gone"] != 1 {
		t.Errorf("causes = %v, want taken 1, released 1, unreachable 7, gone 1", r.causes)
	}
	if len(r.faults) != 4 || len(r.stops[3]) != 1 || len(r.stops[5]) != 1 {
		t.Errorf("faults = %v, stops = %v; want 4 faults, one stop of process 3 and one of process 5", r.faults, r.stops)
	}
	for _, o := range r.overlaps {
		if o.a.owner != "a3" {
			continue
		}
		if d := o.describe(base, []fault{{kind: faultWorkerPause, target: "worker process 2", proc: 2, from: base.Add(500 * time.Millisecond), to: base.Add(time.Second)}}, nil); !strings.Contains(d, "SILENT overlap on k3, within process 2") || !strings.Contains(d, "worker-sigstop") {
			t.Errorf("describe =\n%s\nwant the verdict, the scope and the last fault", d)
		}
	}
	if s := r.summary(); !strings.Contains(s, "LATE 7") || !strings.Contains(s, "SILENT 5") || !strings.Contains(s, "stalled 4") {
		t.Errorf("summary =\n%s\nwant LATE 7, SILENT 5 and stalled 4", s)
	}
}

// TestChaosJournal writes a journal from several goroutines and reads it
// back whole.
func TestChaosJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := createJournal(path, 7)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				j.write(record{Kind: recStart, Owner: fmt.Sprintf("g%d.s%d", g, i), Key: "k", At: int64(i + 1)})
			}
		}()
	}
	for range 4 {
		<-done
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	rs, err := readJournal(path)
	if err != nil || len(rs) != 400 {
		t.Fatalf("readJournal = %d records, %v; want 400, nil", len(rs), err)
	}
	for _, r := range rs {
		if r.Proc != 7 {
			t.Fatalf("record %+v: process %d, want 7", r, r.Proc)
		}
	}
}

func TestChaosCauseClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{watchdog.ErrLockTaken, "taken"},
		{watchdog.ErrLockGone, "gone"},
		{fmt.Errorf("wrapped: %w", watchdog.ErrLockGone), "gone"},
		{&watchdog.UnreachableError{Endpoint: "e"}, "unreachable"},
		{watchdog.ErrMaxHold, "maxhold"},
		{watchdog.ErrQuorumLost, "quorum"},
		{watchdog.ErrLost, "lost"},
		{watchdog.ErrReleased, "released"},
		{watchdog.ErrStopped, "stopped"},
		{watchdog.ErrNotTracked, "not-tracked"},
		{errors.New("x"), "other"},
	} {
		if got := causeClass(tc.err); got != tc.want {
			t.Errorf("causeClass(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestReplayJournals runs the checker on the journals and logs a run kept
// in LOCKWATCH_CHAOS_REPLAY (a directory that LOCKWATCH_CHAOS_DIR made), so
// that a run's findings can be read again. Without it, it skips.
func TestReplayJournals(t *testing.T) {
	dir := os.Getenv("LOCKWATCH_CHAOS_REPLAY")
	if dir == "" {
		t.Skip("set LOCKWATCH_CHAOS_REPLAY to a directory of journals kept by LOCKWATCH_CHAOS_DIR")
	}
	paths, err := filepath.Glob(filepath.Join(dir, "journal-*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no journal-*.jsonl in %s (%v)", dir, err)
	}
	var records []record
	if rs, err := readJournal(filepath.Join(dir, faultsFile)); err == nil {
		records = append(records, rs...)
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v", err)
	}
	logs := map[int][]logLine{}
	for p, path := range paths {
		rs, err := readJournal(path)
		if err != nil {
			t.Errorf("%v", err)
		}
		records = append(records, rs...)
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("watchdog-%d.log", p))); err == nil {
			logs[p] = parseLog(string(b))
		}
	}
	r := check(records)
	t.Logf("%d jobs\n%s", len(r.jobs), r.summary())
	for _, o := range r.overlaps {
		t.Logf("%s", o.describe(r.first, r.faults, logs))
	}
}

// The watchdog's line for a holder told late journals its scheduler's
// wake lateness as the process's lag; other lines journal nothing.
func TestSchedulerTap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := createJournal(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logger := slog.New(schedulerTap{slog.NewTextHandler(&out, nil), j}).With("endpoint", "x")
	logger.Warn("watchdog: no renewal confirmed in time; the locks may be lost, their contexts are cancelled", "locks", 1)
	logger.Warn("watchdog: holders told after their lock's deadline (E minus the drift allowance)",
		"locks", 1, "key", "k", "late_by", 29*time.Millisecond, "scheduler_woke_late", 105*time.Millisecond, "table_lock_wait", time.Microsecond)
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	recs, err := readJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Kind != recLag || recs[0].Proc != 3 || recs[0].Late != int64(105*time.Millisecond) || recs[0].At-recs[0].From != recs[0].Late {
		t.Errorf("journal %+v, want one lag record of process 3, 105 ms late, spanning its lateness", recs)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d lines logged, want both:\n%s", n, out.String())
	}
}
