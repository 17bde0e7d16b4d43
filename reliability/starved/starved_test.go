package starved_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

const (
	watchedLocks = 200
	controlLocks = 20
	lockTTL      = 300 * time.Millisecond
	spinners     = 4
	allocRate    = 200 << 20 // bytes of garbage a second

	// holdEnv sets how long the locks are held, as a Go duration; the
	// default, defaultHold, keeps the test short enough for CI. Issue 20
	// measured with 30s.
	holdEnv     = "LOCKWATCH_STARVED_HOLD"
	defaultHold = 10 * time.Second

	// earlySlack is how much before the poller last saw a key held its
	// OnLost report may come without counting as a give-up while Redis
	// held it: the two processes share the wall clock, but the report's
	// time is taken in the callback and the poll's before its pipeline is
	// written, a few milliseconds apart on a loaded machine.
	earlySlack = 20 * time.Millisecond

	// controlTolerance is how much larger than the control group's lost
	// fraction lockwatch's may be at GOMAXPROCS=1: one control lock's
	// worth (1/20). The control's fraction moves in steps of 1/20, and a
	// control lock that survives by the luck of its goroutine's turn
	// should not decide the verdict; more would let lockwatch do
	// measurably worse than twenty goroutines and a ticker. (Losses under
	// starvation come together: a stall long enough to lose one 300 ms
	// lock loses the others that came due in it, in both groups, so the
	// two fractions move together rather than as independent draws.)
	controlTolerance = 1.0 / controlLocks

	// machineStall: when the poller, in the test process, which nothing
	// in the scenario starves, went this long between two polls during
	// the hold, the machine itself was overloaded beyond the scenario
	// (other test binaries run beside this one under go test ./...), and
	// verdict 2 is reported but not judged, as the exclusion scenarios
	// excuse a loss while the holder or Redis was not scheduled for half
	// a TTL. Verdicts 1 and 3 hold under any load: 1 compares a report
	// with what Redis held, 3 the two groups of one process.
	machineStall = lockTTL / 2

	// holderGrace bounds how long the holder may take beyond the hold
	// (start-up, obtaining, releasing, writing results) before it is
	// killed.
	holderGrace = 60 * time.Second

	// burnersEnv sets how many CPU burner processes run beside the holder
	// from before it starts until it exits (TestHelperBurner: the test
	// binary re-executed, spinning on every CPU), from 0 to 16, and
	// holdBurnersEnv how many more start when the hold does (the holder
	// waits for them), so that the machine turns busy at the instant the
	// holder's own load starts. The burners make the machine busy as
	// issue 26 found it: the holder is starved not only by its own
	// spinners but by the machine, and the watchdog's timers, Redis and
	// the poller all wait for CPU. 0 and 0 run the scenario on a machine
	// only the holder loads (issue 20), where verdict 2 applies.
	//
	// The defaults are calibrated on the project's 2-core machine so that
	// the hand-refreshed control keeps most of its locks at GOMAXPROCS=2
	// (a load under which the control loses everything judges nothing but
	// verdict 1): one burner for the run and two more for the hold. Under
	// -race the test skips: the holder's own load costs several times the
	// CPU there, and .ci/run runs it without -race.
	burnersEnv = "LOCKWATCH_STARVED_BURNERS"
	// shareEnv=log logs verdict 3 (lockwatch's share of locks lost
	// against the hand-refreshed control's) at GOMAXPROCS=1 instead of
	// failing on it: .ci/run sets it, because at GOMAXPROCS=1 on a loaded
	// machine lockwatch still loses a larger share in some runs (issue 26
	// item 4, open), while every other verdict, I12's and verdict 3 at
	// GOMAXPROCS=2 included, holds and fails the run.
	shareEnv       = "LOCKWATCH_STARVED_SHARE"
	holdBurnersEnv = "LOCKWATCH_STARVED_HOLD_BURNERS"

	// batchWindow and batchLimit are verdict 4's: when batchLimit or more
	// watched locks are given up (OnLost) within batchWindow of one
	// another, or expire on Redis within batchWindow of one another, one
	// renew call's locks were decided together (issue 26: 100 of 200 at
	// one instant, exactly one call's keys) unless the holder's whole
	// process stood still, which the hand-refreshed control shows by
	// losing at least controlQuarter of its locks too.
	batchWindow    = 5 * time.Millisecond
	batchLimit     = 50
	controlQuarter = 0.25
)

// TestStarvedHolder (issues 20 and 26): a holder process starved of CPU
// (4 goroutines spinning and 200 MB/s of garbage, at GOMAXPROCS=1 and then
// 2) on a machine made busy by CPU burner processes beside it holds 200
// redislock locks of 300 ms through a watched client with a watchdog
// attached, and 20 control locks refreshed by hand, every TTL/3, by a
// goroutine each, through a client no lockwatch watches. The test process
// reads every key's PTTL every 10 ms.
//
//  1. No lock may be given up (OnLost) while Redis still held it: each
//     report must come no more than earlySlack before the last poll that
//     found the key held (invariant I12: the holder's own scheduling
//     delay is not evidence that Redis is slow).
//  2. On a machine only the holder loads (no burner), at GOMAXPROCS=2, no
//     watched lock may be lost, unless the control shows that the machine
//     was loaded beyond the scenario (it lost locks too: verdict 3
//     decides then).
//  3. At both GOMAXPROCS, busy machine or not, lockwatch must lose no
//     larger a share of its locks than the hand-refreshed control, within
//     controlTolerance (issue 26, item 4).
//  4. No renew call's locks are decided together (invariant I16): fewer
//     than batchLimit watched locks given up within batchWindow of one
//     another, and fewer expiring on Redis within batchWindow, unless the
//     control shows that the whole holder stood still (it lost a quarter
//     of its locks in the run, or a quarter of those it still held within
//     a TTL of the batch).
//
// A lock is lost when Redis dropped it before the hold ended, when it was
// reported (OnLost; for the control, Refresh answered ErrNotObtained), or
// when its release found it not held.
func TestStarvedHolder(t *testing.T) {
	harness.SkipShort(t, "starves a holder process, with CPU burner processes beside it, for two holds of 10 s (LOCKWATCH_STARVED_HOLD)")
	hold := defaultHold
	if v := os.Getenv(holdEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 10*time.Minute {
			t.Fatalf("%s=%q: want a duration from 1s to 10m, such as 30s", holdEnv, v)
		}
		hold = d
	}
	if raceEnabled {
		t.Skip("the starved holder judges whether renewals keep up in real time in a process starved of CPU; the race detector makes the holder " +
			"several times slower than what it tests, and go test -race ./... runs other test binaries beside it: .ci/run runs it without -race in a step of its own")
	}
	def := machineLoad{run: 1, hold: 2}
	load := machineLoad{run: envCount(t, burnersEnv, def.run), hold: envCount(t, holdBurnersEnv, def.hold)}
	srv := testredis.Start(t)
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			runStarved(t, srv.Addr, procs, hold, load)
		})
	}
}

// machineLoad is how many burner processes run beside the holder: run
// from before the holder starts until it exits, hold from the start of
// its hold.
type machineLoad struct{ run, hold int }

func (m machineLoad) total() int { return m.run + m.hold }

// envCount reads a number of burner processes, from 0 to 16, from the
// environment variable name; def when it is not set.
func envCount(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 16 {
		t.Fatalf("%s=%q: want a number of burner processes from 0 to 16", name, v)
	}
	return n
}

// run is one holder process's run, as the test process saw it.
type run struct {
	procs   int
	cfg     holderConfig
	sum     holderSummary
	locks   []lockResult
	poll    *poller
	index   map[string]int // key -> index in poll.keys
	logPath string

	load       machineLoad   // the burner processes beside the holder
	burnerCPU  time.Duration // the CPU time they used together
	burnerWall time.Duration // how long the longest of them ran
	holderCPU  time.Duration // the holder's CPU time (user and system)
	holderWall time.Duration // from the holder's start to its exit
}

// keepEnv names a directory where the holder's results and the
// watchdog's log are kept, to look into a run.
const keepEnv = "LOCKWATCH_STARVED_DIR"

func runStarved(t *testing.T, addr string, procs int, hold time.Duration, load machineLoad) {
	dir := t.TempDir()
	if keep := os.Getenv(keepEnv); keep != "" {
		// The holder's results and the watchdog's log (Debug and above)
		// are kept there, one directory per GOMAXPROCS.
		dir = filepath.Join(keep, fmt.Sprintf("gomaxprocs-%d", procs))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prefix := fmt.Sprintf("starved:%d:%d", procs, time.Now().UnixNano())
	cfg := holderConfig{
		Addr: addr, TTL: lockTTL, Hold: hold, Spinners: spinners, AllocRate: allocRate,
		Out: filepath.Join(dir, "results.jsonl"), Log: filepath.Join(dir, "watchdog.log"),
	}
	for i := range watchedLocks {
		cfg.Watched = append(cfg.Watched, fmt.Sprintf("%s:lw:%03d", prefix, i))
	}
	for i := range controlLocks {
		cfg.Control = append(cfg.Control, fmt.Sprintf("%s:ctl:%02d", prefix, i))
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		t.Fatalf("marshal the holder's configuration: %v", err)
	}

	spy := harness.Client(t, addr)
	keys := append(slices.Clone(cfg.Watched), cfg.Control...)
	p := newPoller(spy, keys)
	p.pollOnce(context.Background()) // connects before the holder starts
	if p.failed > 0 {
		t.Fatalf("first poll of %s failed: %v", addr, p.errs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), hold+holderGrace)
	defer cancel()
	// The run's burners spin from before the holder starts until it has
	// exited: the holder obtains, holds and releases on a busy machine.
	// The hold's burners start when the holder is about to start its own
	// load, so that the machine turns busy at once as the hold begins.
	var burn, holdBurn *burners
	if load.run > 0 {
		burn = startBurners(t, load.run, hold+holderGrace+burnerReadyWithin)
	}
	// CommandContext kills the holder by its pid when ctx ends; the
	// cleanup below kills it by pid too if the test ends first.
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1", "-test.v",
		"-test.timeout="+(hold+holderGrace-5*time.Second).String())
	cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs), holderEnv+"="+string(spec))
	out := newMarkWriter(holderReady) // read in full only after the holder has exited
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("the holder's standard input: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the holder: %v", err)
	}
	holderStart := time.Now()
	exited := make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	polled := make(chan struct{})
	go func() {
		defer close(polled)
		p.run(ctx, exited)
	}()
	// The holder has obtained every lock and waits for the go to start
	// its load and the hold.
	select {
	case <-out.seen:
		if load.hold > 0 {
			holdBurn = startBurners(t, load.hold, hold+holderGrace+burnerReadyWithin)
		}
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Errorf("tell the holder to start its hold: %v", err)
		}
	case <-exited:
	case <-ctx.Done():
	}
	_ = stdin.Close()
	<-polled
	select {
	case <-exited:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("holder (%v, GOMAXPROCS=%d) still running %v after it started; killed; output:\n%s", cfg, procs, hold+holderGrace, tail(out.String(), 60))
	}
	holderWall := time.Since(holderStart)
	burnCPU, burnWall, burnErr := burn.stop()
	holdCPU, holdWall, holdErr := holdBurn.stop()
	if err := errors.Join(burnErr, holdErr); err != nil {
		t.Errorf("the machine was not kept busy throughout: %v", err)
	}
	if werr != nil {
		t.Fatalf("holder (%v, GOMAXPROCS=%d): %v; output:\n%s", cfg, procs, werr, tail(out.String(), 60))
	}
	r := &run{procs: procs, cfg: cfg, poll: p, index: map[string]int{}, logPath: cfg.Log,
		load: load, burnerCPU: burnCPU + holdCPU, burnerWall: max(burnWall, holdWall), holderWall: holderWall}
	if st := cmd.ProcessState; st != nil {
		r.holderCPU = st.UserTime() + st.SystemTime()
	}
	for i, k := range keys {
		r.index[k] = i
	}
	if err := r.readResults(); err != nil {
		t.Fatalf("holder results: %v; holder output:\n%s", err, tail(out.String(), 60))
	}
	r.judge(t)
}

// readResults reads the holder's JSON lines.
func (r *run) readResults() error {
	f, err := os.Open(r.cfg.Out)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	summaries := 0
	for sc.Scan() {
		var line struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		switch line.Type {
		case "lock":
			var l lockResult
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				return fmt.Errorf("line %q: %w", sc.Text(), err)
			}
			r.locks = append(r.locks, l)
		case "summary":
			if err := json.Unmarshal(sc.Bytes(), &r.sum); err != nil {
				return fmt.Errorf("line %q: %w", sc.Text(), err)
			}
			summaries++
		default:
			return fmt.Errorf("line %q: unknown type %q", sc.Text(), line.Type)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if want := watchedLocks + controlLocks; len(r.locks) != want || summaries != 1 {
		return fmt.Errorf("%d lock lines and %d summaries, want %d and 1", len(r.locks), summaries, want)
	}
	return nil
}

// groupFigures counts one group's losses.
type groupFigures struct {
	n          int
	lost       int
	dropped    int            // Redis stopped holding it before the hold ended
	reported   int            // locks with a report
	byKind     map[string]int // reports by kind
	notHeld    int            // release found it not held
	maxGap     time.Duration  // control: the longest time between two successful refreshes
	refreshErr int            // control: refreshes that failed with another error
	refreshes  int            // control: refreshes that succeeded
	firstRep   time.Time      // the earliest report
	lastRep    time.Time      // the latest report
}

// earlyReport is a report made while Redis still held the key.
type earlyReport struct {
	key     string
	rep     lossReport
	heldFor time.Duration // the last poll that found it held was sent this long after the report
	goneBy  time.Duration // the first poll that found it gone answered this long after it; <0: never seen gone
	// renewed: Redis applied a renewal of the key at least this long
	// after the report; 0: none seen after it.
	renewed time.Duration
}

func (r *run) judge(t *testing.T) {
	t.Helper()
	if r.sum.GOMAXPROCS != r.procs {
		t.Fatalf("the holder ran with GOMAXPROCS=%d, want %d", r.sum.GOMAXPROCS, r.procs)
	}
	if r.sum.Tracked != watchedLocks {
		t.Fatalf("the registry tracked %d locks once the holder had obtained %d through the watched client, want all of them", r.sum.Tracked, watchedLocks)
	}
	start, end := r.sum.HoldStart, r.sum.HoldEnd
	rel := func(at time.Time) string { return fmt.Sprintf("%+.3fs", at.Sub(start).Seconds()) }
	figs := map[string]*groupFigures{groupWatched: {byKind: map[string]int{}}, groupControl: {byKind: map[string]int{}}}
	var early []earlyReport
	var unseen, back, noTTL, changed []string
	var leastPTTL time.Duration = -1
	for _, l := range r.locks {
		g := figs[l.Group]
		s := &r.poll.state[r.index[l.Key]]
		g.n++
		if s.firstHeld.IsZero() {
			unseen = append(unseen, l.Key)
		}
		if !s.backAt.IsZero() {
			back = append(back, fmt.Sprintf("%s (gone at %s, back at %s)", l.Key, rel(s.goneAt), rel(s.backAt)))
		}
		if s.noTTL > 0 {
			noTTL = append(noTTL, l.Key)
		}
		if !s.changedAt.IsZero() {
			changed = append(changed, fmt.Sprintf("%s (at %s)", l.Key, rel(s.changedAt)))
		}
		stopped := s.stoppedAt()
		dropped := !stopped.IsZero() && stopped.Before(end)
		if dropped {
			g.dropped++
		}
		if len(l.Reports) > 0 {
			g.reported++
		}
		if l.Release == "not held" {
			g.notHeld++
		}
		if dropped || len(l.Reports) > 0 || l.Release == "not held" {
			g.lost++
		}
		g.maxGap = max(g.maxGap, l.MaxRefreshGap)
		g.refreshErr += l.RefreshErrs
		g.refreshes += l.Refreshes
		for _, rep := range l.Reports {
			g.byKind[rep.Kind]++
			if g.firstRep.IsZero() || rep.At.Before(g.firstRep) {
				g.firstRep = rep.At
			}
			if rep.At.After(g.lastRep) {
				g.lastRep = rep.At
			}
		}
		if l.Group != groupWatched {
			continue
		}
		if !s.firstHeld.IsZero() && (leastPTTL < 0 || s.minPTTL < leastPTTL) {
			leastPTTL = s.minPTTL
		}
		for _, rep := range l.Reports {
			if held := s.lastHeld.Sub(rep.At); held > earlySlack {
				e := earlyReport{key: l.Key, rep: rep, heldFor: held, goneBy: -1}
				if st := s.stoppedAt(); !st.IsZero() {
					e.goneBy = st.Sub(rep.At)
				}
				if s.renewedAfter.After(rep.At) {
					e.renewed = s.renewedAfter.Sub(rep.At)
				}
				early = append(early, e)
			}
		}
	}
	w, c := figs[groupWatched], figs[groupControl]
	longest, p99 := r.poll.gaps(start, end)
	secs := end.Sub(start).Seconds()
	t.Logf("GOMAXPROCS=%d, %d spinners, %.0f MB/s of garbage (%d GC cycles, %v of pauses), %d spinner rounds, hold %v (%s to %s)",
		r.procs, r.cfg.Spinners, float64(r.sum.Allocated)/(1<<20)/secs, r.sum.GCCycles, r.sum.GCPause.Round(time.Millisecond),
		r.sum.Spins, end.Sub(start).Round(time.Millisecond), rel(start), rel(end))
	busy := "none: only the holder loads the machine"
	if r.load.total() > 0 {
		busy = fmt.Sprintf("%d processes from before the holder's start and %d from its hold's, each spinning on all %d CPUs, %.2f CPUs' worth for %v", r.load.run, r.load.hold, r.sum.NumCPU,
			r.burnerCPU.Seconds()/max(r.burnerWall.Seconds(), 1e-3), r.burnerWall.Round(time.Millisecond))
	}
	t.Logf("burners beside the holder: %s; the holder got %.2f CPUs' worth for %v (GOMAXPROCS=%d)",
		busy, r.holderCPU.Seconds()/max(r.holderWall.Seconds(), 1e-3), r.holderWall.Round(time.Millisecond), r.procs)
	// Verdict 4's figures: the largest batch of watched locks given up
	// (their first OnLost) within batchWindow, and of watched keys Redis
	// dropped within batchWindow (when each expired, from the last PTTL
	// the poller read: its send time plus that PTTL, within a poll's round
	// trip of the truth).
	var givenUp, expired []time.Time
	var controlLost []time.Time // when each lost control lock was first lost
	for _, l := range r.locks {
		s := &r.poll.state[r.index[l.Key]]
		var exp time.Time
		if st := s.stoppedAt(); !st.IsZero() && st.Before(end) && s.changedAt.IsZero() && !s.prevSent.IsZero() {
			exp = s.prevSent.Add(s.prevPTTL)
		}
		if l.Group == groupControl {
			at := exp
			if len(l.Reports) > 0 && (at.IsZero() || l.Reports[0].At.Before(at)) {
				at = l.Reports[0].At
			}
			if !at.IsZero() {
				controlLost = append(controlLost, at)
			}
			continue
		}
		if len(l.Reports) > 0 {
			givenUp = append(givenUp, l.Reports[0].At)
		}
		if !exp.IsZero() {
			expired = append(expired, exp)
		}
	}
	// The first watched loss, for the log lines of failure messages.
	var firstLoss time.Time
	for _, at := range slices.Concat(givenUp, expired) {
		if firstLoss.IsZero() || at.Before(firstLoss) {
			firstLoss = at
		}
	}
	gBatch, gAt := largestBatch(givenUp, batchWindow)
	eBatch, eAt := largestBatch(expired, batchWindow)
	batchAt := func(n int, at time.Time) string {
		if n == 0 {
			return ""
		}
		return " at " + rel(at)
	}
	t.Logf("batches: at most %d watched locks given up within %v of one another%s (%d given up in all); at most %d expired on Redis within %v of one another%s (%d expired in all)",
		gBatch, batchWindow, batchAt(gBatch, gAt), len(givenUp), eBatch, batchWindow, batchAt(eBatch, eAt), len(expired))
	span := func(g *groupFigures) string {
		if g.firstRep.IsZero() {
			return ""
		}
		return fmt.Sprintf(", from %s to %s", rel(g.firstRep), rel(g.lastRep))
	}
	t.Logf("lockwatch: lost %d of %d (Redis dropped %d during the hold; OnLost for %d%s: %s; release found %d not held); least PTTL seen %v",
		w.lost, w.n, w.dropped, w.reported, span(w), kinds(w.byKind), w.notHeld, leastPTTL)
	refreshNote := "no refresh succeeded"
	if c.refreshes > 0 {
		refreshNote = fmt.Sprintf("%d refreshes succeeded, the longest time from the obtain or a refresh to the next %v", c.refreshes, c.maxGap.Round(time.Millisecond))
	}
	t.Logf("control (refreshed by hand every %v): lost %d of %d (Redis dropped %d during the hold; Refresh answered ErrNotObtained for %d%s; release found %d not held); %s; %d refresh errors",
		lockTTL/3, c.lost, c.n, c.dropped, c.reported, span(c), c.notHeld, refreshNote, c.refreshErr)
	t.Logf("watchdog: %d renewals, %d renewal pipelines failed or unanswered in time (%d renew calls); %d deadlines missed (%d when the first OnLost came), %d holders told a lock may be lost, %d locks lost",
		r.sum.Renewals, r.sum.Failures, r.sum.RenewErrors, r.sum.DeadlinesMissed, r.sum.MissedAtFirstLoss, r.sum.Unconfirmed, r.sum.Lost)
	t.Logf("poller: %d polls of %d keys every %v; during the hold the longest gap between two polls %v, p99 %v; %d failed %v",
		r.poll.polls, len(r.poll.keys), pollPeriod, longest.Round(time.Millisecond), p99.Round(time.Millisecond), r.poll.failed, r.poll.errs)
	if r.sum.LateOnLost > 0 {
		t.Logf("%d OnLost calls came after the hold ended", r.sum.LateOnLost)
	}
	if len(early) > 0 {
		renewedLater := 0
		for _, e := range early {
			if e.renewed > 0 {
				renewedLater++
			}
		}
		renewedNote := "none renewed on Redis after its report"
		if renewedLater > 0 {
			renewedNote = fmt.Sprintf("%d renewed on Redis after the report, %s after it at least", renewedLater, spread(early, func(e earlyReport) time.Duration {
				if e.renewed == 0 {
					return -1
				}
				return e.renewed
			}))
		}
		t.Logf("early reports: %d of %d locks given up while Redis still held them, by %s more (the poller's last sight of the key held, after the report); Redis dropped them %s after the report; %s",
			len(early), w.n, spread(early, func(e earlyReport) time.Duration { return e.heldFor }), spread(early, func(e earlyReport) time.Duration { return e.goneBy }), renewedNote)
	} else {
		t.Logf("early reports: none (no OnLost more than %v before the poller last saw its key held)", earlySlack)
	}

	if len(unseen) > 0 {
		t.Errorf("%d keys never seen held by the poller, want every key seen: %v", len(unseen), head(unseen, 5))
	}
	if len(back) > 0 {
		t.Errorf("%d keys held again after Redis had dropped them, want none re-created: %v", len(back), head(back, 5))
	}
	if len(noTTL) > 0 {
		t.Errorf("%d keys seen without an expiry, want every lock key with a TTL: %v", len(noTTL), head(noTTL, 5))
	}
	if len(changed) > 0 {
		t.Errorf("%d keys seen with another value than their holder's (nothing else writes them), want none: %v", len(changed), head(changed, 5))
	}
	// A counter says the watchdog falls behind before a lock is lost (I16).
	if w.reported > 0 && r.sum.MissedAtFirstLoss <= 0 {
		t.Errorf("Stats().DeadlinesMissed was %d when the first OnLost came, want it above 0: a lock was lost with no deadline missed before", r.sum.MissedAtFirstLoss)
	}
	// Verdict 1: no give-up while Redis held the key.
	if len(early) > 0 {
		slices.SortFunc(early, func(a, b earlyReport) int { return cmp.Compare(b.heldFor, a.heldFor) })
		var b strings.Builder
		for i, e := range early {
			if i == 10 {
				fmt.Fprintf(&b, "\n  ... and %d more", len(early)-10)
				break
			}
			gone := "never seen gone"
			if e.goneBy >= 0 {
				gone = fmt.Sprintf("gone by %v after the report", e.goneBy.Round(time.Millisecond))
			}
			confirmed := ""
			if e.renewed > 0 {
				confirmed = fmt.Sprintf("; Redis applied a renewal at least %v after the report", e.renewed.Round(time.Millisecond))
			}
			if !e.rep.ConfirmedAt.IsZero() {
				confirmed += fmt.Sprintf("; last confirmed by the watchdog %v before the report", e.rep.At.Sub(e.rep.ConfirmedAt).Round(time.Millisecond))
			}
			fmt.Fprintf(&b, "\n  %s: OnLost at %s (%s: %s): given up while Redis still held the key for %v more (%s)%s",
				e.key, rel(e.rep.At), e.rep.Kind, e.rep.Reason, e.heldFor.Round(time.Millisecond), gone, confirmed)
		}
		t.Errorf("%d of %d locks given up while Redis still held the key (more than %v before the poller last saw it held), want none (invariant I12):%s%s",
			len(early), w.n, earlySlack, b.String(), r.logNote(early[0].rep.At))
	}
	fw, fc := float64(w.lost)/float64(w.n), float64(c.lost)/float64(c.n)
	// Verdict 2: on a machine only the holder loads, at GOMAXPROCS=2, no
	// watched lock is lost.
	if r.procs == 2 && r.load.total() == 0 {
		switch {
		case w.lost == 0:
		case longest >= machineStall:
			t.Logf("NOT JUDGED: at GOMAXPROCS=2 lockwatch lost %d of %d locks (the control %d of %d), but the test process itself went %v between two polls (at least %v): the machine was overloaded beyond the scenario",
				w.lost, w.n, c.lost, c.n, longest.Round(time.Millisecond), machineStall)
		case c.lost > 0:
			t.Logf("NOT JUDGED: at GOMAXPROCS=2 lockwatch lost %d of %d locks, but the hand-refreshed control lost %d of %d: the holder's process could not keep 300 ms locks by hand either, so something beside the scenario loaded the machine; verdict 3 compares the shares",
				w.lost, w.n, c.lost, c.n)
		default:
			t.Errorf("at GOMAXPROCS=2 lockwatch lost %d of %d locks, want none (the hand-refreshed control lost %d of %d)%s", w.lost, w.n, c.lost, c.n, r.logNote(firstLoss))
		}
	}
	// Verdict 3: at every GOMAXPROCS, busy machine or not, lockwatch loses
	// no larger a share of its locks than the control of its own, plus
	// one control lock's worth (issue 26, item 4).
	if fw > fc+controlTolerance {
		report := t.Errorf
		if os.Getenv(shareEnv) == "log" && r.procs == 1 {
			report = t.Logf
			t.Logf("NOT JUDGED (%s=log; issue 26 item 4 is open, see BENCHMARKS.md#a-holder-starved-of-cpu):", shareEnv)
		}
		report("at GOMAXPROCS=%d with %s beside the holder, lockwatch lost %d of %d locks (%.1f%%), the hand-refreshed control %d of %d (%.1f%%): want lockwatch's share at most the control's + %.1f%%%s",
			r.procs, r.burnersNote(), w.lost, w.n, 100*fw, c.lost, c.n, 100*fc, 100*controlTolerance, r.logNote(firstLoss))
	}
	// Verdict 4: no renew call decides its locks together (invariant
	// I16), unless the whole holder stood still; the control shows it by
	// losing a quarter of its locks or more: in the whole run, or, when
	// at least a fifth of them were still held, a quarter of those within
	// a TTL of the batch.
	for _, b := range []struct {
		what string
		ts   []time.Time
	}{
		{"watched locks were given up (OnLost)", givenUp},
		{"watched keys expired on Redis (one renew call's locks left to expire together)", expired},
	} {
		for _, at := range batches(b.ts, batchWindow, batchLimit) {
			n := countWithin(b.ts, at, at.Add(batchWindow))
			held, near := 0, 0
			for _, lost := range controlLost {
				if !lost.Before(at.Add(-lockTTL)) {
					held++
					if !lost.After(at.Add(batchWindow + lockTTL)) {
						near++
					}
				}
			}
			held += c.n - len(controlLost) // never lost
			whole := fc < controlQuarter
			windowed := 5*held >= c.n && float64(near) < controlQuarter*float64(held)
			if !whole && !windowed {
				t.Logf("batch not judged: %d %s within %v at %s, but the control lost %d of %d in the run, and %d of the %d it still held within %v of the batch (the holder may have stood still)",
					n, b.what, batchWindow, rel(at), c.lost, c.n, near, held, lockTTL)
				continue
			}
			t.Errorf("at GOMAXPROCS=%d with %s, %d %s within %v of one another, at %s, while the hand-refreshed control lost %d of %d in the run and %d of the %d it still held within %v of that instant: want fewer than %d decided at once (invariant I16)%s",
				r.procs, r.burnersNote(), n, b.what, batchWindow, rel(at), c.lost, c.n, near, held, lockTTL, batchLimit, r.logNote(at))
		}
	}
}

// burnersNote names the load beside the holder in failure messages.
func (r *run) burnersNote() string {
	if r.load.total() == 0 {
		return "no burner"
	}
	return fmt.Sprintf("%d CPU burner processes", r.load.total())
}

// largestBatch returns the largest number of times within window of one
// another (the last at most window after the first) and the first of them.
func largestBatch(ts []time.Time, window time.Duration) (int, time.Time) {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	best, at := 0, time.Time{}
	for i, j := 0, 0; j < len(ts); j++ {
		for ts[j].Sub(ts[i]) > window {
			i++
		}
		if n := j - i + 1; n > best {
			best, at = n, ts[i]
		}
	}
	return best, at
}

// batches returns the first time of every batch of at least limit times
// within window of one another (the last at most window after the
// first), batches not overlapping, in order.
func batches(ts []time.Time, window time.Duration, limit int) []time.Time {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var out []time.Time
	for i := 0; i < len(ts); {
		j := i
		for j < len(ts) && ts[j].Sub(ts[i]) <= window {
			j++
		}
		if j-i >= limit {
			out = append(out, ts[i])
			i = j
			continue
		}
		i++
	}
	return out
}

// countWithin counts the times in [from, to].
func countWithin(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, at := range ts {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// logNote returns the watchdog's log lines (Debug: every renew call, with
// how long it waited to be sent and for its answer) from three TTLs before
// at to one TTL after it, other than lock losses, which it counts: what
// the watchdog did for the locks lost at at. With at zero, the first few
// lines that are not renewals.
func (r *run) logNote(at time.Time) string {
	data, err := os.ReadFile(r.logPath)
	if err != nil {
		return fmt.Sprintf("\nwatchdog log: %v", err)
	}
	from, to := at.Add(-3*lockTTL), at.Add(lockTTL)
	lost := 0
	var other []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.Contains(line, "watchdog: lock lost") {
			lost++
			continue
		}
		if at.IsZero() {
			if !strings.Contains(line, "watchdog: renewed") {
				other = append(other, line)
			}
			continue
		}
		if ts, ok := logTime(line); ok && !ts.Before(from) && !ts.After(to) {
			other = append(other, line)
		}
	}
	const most = 60
	if at.IsZero() {
		return fmt.Sprintf("\nwatchdog log: %d \"lock lost\" lines; the first others but renewals (%d):\n  %s", lost, len(other), strings.Join(head(other, 8), "\n  "))
	}
	if len(other) > most {
		other = other[len(other)-most:]
	}
	return fmt.Sprintf("\nwatchdog log: %d \"lock lost\" lines; the others from %v before to %v after %s (the last %d at most):\n  %s",
		lost, 3*lockTTL, lockTTL, at.Format("15:04:05.000"), most, strings.Join(other, "\n  "))
}

// logTime reads the time of a line of the holder's log (slog's text
// handler: it begins "time=" and an RFC 3339 time).
func logTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	if i := strings.IndexByte(v, ' '); i >= 0 {
		v = v[:i]
	}
	ts, err := time.Parse(time.RFC3339Nano, v)
	return ts, err == nil
}

// kinds formats report counts by kind.
func kinds(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// spread formats the least, median and largest of f over es (negative
// values, meaning unknown, left out).
func spread(es []earlyReport, f func(earlyReport) time.Duration) string {
	var ds []time.Duration
	for _, e := range es {
		if d := f(e); d >= 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "(unknown)"
	}
	slices.Sort(ds)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s to %s (median %s)", ms(ds[0]), ms(ds[len(ds)-1]), ms(ds[len(ds)/2]))
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(slices.Clone(s[:n]), fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// markWriter collects a process's output and closes seen once mark has
// appeared in it. It is safe for concurrent use.
type markWriter struct {
	mu   sync.Mutex // guards buf and done
	buf  bytes.Buffer
	mark []byte
	done bool
	seen chan struct{}
}

func newMarkWriter(mark string) *markWriter {
	return &markWriter{mark: []byte(mark), seen: make(chan struct{})}
}

func (w *markWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && bytes.Contains(w.buf.Bytes(), w.mark) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *markWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestStarvedBatches checks verdict 4's counting on made-up times: it
// must find a batch where there is one, and only there.
func TestStarvedBatches(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	var ts []time.Time
	add := func(n int, at, step time.Duration) {
		for i := range n {
			ts = append(ts, base.Add(at+time.Duration(i)*step))
		}
	}
	add(100, 0, 10*time.Microsecond)           // one call's 100 locks, within 1 ms
	add(60, time.Second, 100*time.Microsecond) // 60 within 6 ms: 51 within 5 ms
	add(200, 2*time.Second, time.Millisecond)  // spread: 6 within 5 ms at most
	add(49, 3*time.Second, 0)                  // 49 at one instant: under the limit
	if n, at := largestBatch(ts, batchWindow); n != 100 || !at.Equal(base) {
		t.Errorf("largestBatch = %d at %v, want 100 at %v", n, at, base)
	}
	got := batches(ts, batchWindow, batchLimit)
	want := []time.Time{base, base.Add(time.Second)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("batches = %v, want %v", got, want)
	}
	if n := countWithin(ts, base.Add(time.Second), base.Add(time.Second+batchWindow)); n != 51 {
		t.Errorf("countWithin the second batch's window = %d, want 51", n)
	}
	if n, _ := largestBatch(nil, batchWindow); n != 0 {
		t.Errorf("largestBatch(nil) = %d, want 0", n)
	}
}
