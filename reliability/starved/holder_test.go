package starved_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// holderEnv carries the JSON holderConfig of a holder process; without it
// TestHelperHolder skips.
const holderEnv = "LOCKWATCH_STARVED_HOLDER"

// traceEnv, when set to a path, has each holder write a runtime trace of
// its hold to the path with ".<GOMAXPROCS>" appended.
const traceEnv = "LOCKWATCH_STARVED_TRACE"

// startTrace starts a runtime trace into a new file at path; stop ends it.
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}, nil
}

// holderReady is what a holder prints on its standard output once it
// holds every lock; it then waits for a line on its standard input before
// it starts its load and its hold.
const holderReady = "STARVED-HOLDER-READY"

// holderConfig is what the parent test tells a holder process.
type holderConfig struct {
	Addr      string        `json:"addr"`
	Watched   []string      `json:"watched"` // keys held through the watched client
	Control   []string      `json:"control"` // keys refreshed by hand through an unwatched client
	TTL       time.Duration `json:"ttl"`
	Hold      time.Duration `json:"hold"`
	Spinners  int           `json:"spinners"`
	AllocRate int64         `json:"alloc_rate"` // bytes of garbage per second, all spinners together
	Out       string        `json:"out"`        // the JSON lines file the results go to
	Log       string        `json:"log"`        // the watchdog's log (slog text, level Info)
}

// Group names in lockResult.
const (
	groupWatched = "lockwatch"
	groupControl = "control"
)

// lossReport is one OnLost call, or the hand refresher giving up.
type lossReport struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // unreachable, gone, taken, max-hold, other; for the control: not-obtained
	Reason string    `json:"reason"`
	// ConfirmedAt and TTL are the lock's as OnLost got it: when Redis last
	// confirmed it (as the watchdog recorded it), and its TTL.
	ConfirmedAt time.Time     `json:"confirmed_at,omitzero"`
	TTL         time.Duration `json:"ttl,omitzero"`
}

// lockResult is one line of the holder's results: one lock.
type lockResult struct {
	Type    string       `json:"type"` // "lock"
	Group   string       `json:"group"`
	Key     string       `json:"key"`
	Reports []lossReport `json:"reports,omitempty"`
	// Release is what releasing the lock after the hold returned: "ok",
	// "not held" (redislock.ErrLockNotHeld) or another error's text.
	Release string `json:"release"`
	// For the control group: refreshes that succeeded, that failed with
	// an error other than ErrNotObtained, and the longest time between
	// two successful refreshes (or from the obtain to the first one).
	Refreshes     int           `json:"refreshes,omitzero"`
	RefreshErrs   int           `json:"refresh_errs,omitzero"`
	LastErr       string        `json:"last_err,omitzero"`
	MaxRefreshGap time.Duration `json:"max_refresh_gap,omitzero"`
}

// holderSummary is the last line of the holder's results.
type holderSummary struct {
	Type       string        `json:"type"` // "summary"
	GOMAXPROCS int           `json:"gomaxprocs"`
	NumCPU     int           `json:"num_cpu"`
	Tracked    int           `json:"tracked"` // reg.Locks() once every lock was obtained
	HoldStart  time.Time     `json:"hold_start"`
	HoldEnd    time.Time     `json:"hold_end"`
	Allocated  uint64        `json:"allocated"` // bytes allocated during the hold (runtime.MemStats.TotalAlloc)
	GCCycles   uint32        `json:"gc_cycles"`
	GCPause    time.Duration `json:"gc_pause"`
	Spins      int64         `json:"spins"` // spinner iterations, all spinners together
	LateOnLost int           `json:"late_on_lost"`
	// The watchdog's counters at the end of the hold: locks renewed,
	// renewal pipelines that failed or were not answered in time, and the
	// renew calls among them.
	Renewals    int64 `json:"renewals"`
	Failures    int64 `json:"failures"`
	RenewErrors int64 `json:"renew_errors"`
	// Lost counts the locks the watchdog gave up (OnLost calls);
	// Unconfirmed, apart, those whose holders it told may be lost (I15);
	// DeadlinesMissed the renewals not confirmed by their deadline, at the
	// end of the hold and when the first OnLost came (MissedAtFirstLoss,
	// -1 when none came): a counter says so before a lock is lost (I16).
	Lost              int64 `json:"lost"`
	Unconfirmed       int64 `json:"unconfirmed"`
	DeadlinesMissed   int64 `json:"deadlines_missed"`
	MissedAtFirstLoss int64 `json:"missed_at_first_loss"`
}

// TestHelperHolder is the starved holder process that TestStarvedHolder
// runs (the test binary, re-executed with holderEnv and GOMAXPROCS set).
// It holds the watched locks through a watched client with a watchdog
// attached and refreshes the control locks by hand, while Spinners
// goroutines burn CPU and allocate AllocRate bytes of garbage a second,
// for Hold. Then it stops the load, releases every lock, and writes one
// JSON line per lock and a summary to Out.
func TestHelperHolder(t *testing.T) {
	spec, ok := os.LookupEnv(holderEnv)
	if !ok {
		t.Skip("the starved holder process of TestStarvedHolder; runs only as its child")
	}
	var cfg holderConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatalf("%s: %v", holderEnv, err)
	}
	logFile, err := os.Create(cfg.Log)
	if err != nil {
		t.Fatalf("create the watchdog's log: %v", err)
	}
	defer logFile.Close()

	watched := harness.Client(t, cfg.Addr)
	plain := harness.Client(t, cfg.Addr)
	reg := harness.Watch(t, watched)
	losses := &harness.LostLog{}
	var wdp atomic.Pointer[watchdog.Watchdog]
	var firstLoss sync.Once
	missedAtFirstLoss := int64(-1)
	onLost := func(l registry.Lock, err error) {
		firstLoss.Do(func() { missedAtFirstLoss = wdp.Load().Stats().DeadlinesMissed })
		losses.Record(l, err)
	}
	wd, err := watchdog.Attach(reg,
		watchdog.WithOnLost(onLost),
		watchdog.WithLogger(slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatalf("Attach: got %v, want nil", err)
	}
	wdp.Store(wd)
	stopped := false
	defer func() {
		if !stopped {
			wd.Stop()
		}
	}()

	ctx := context.Background()
	for _, c := range []*redis.Client{watched, plain} {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %s: got %v, want nil", cfg.Addr, err)
		}
	}
	lw := redislock.New(watched)
	held := make([]*redislock.Lock, len(cfg.Watched))
	for i, key := range cfg.Watched {
		if held[i], err = lw.Obtain(ctx, key, cfg.TTL, nil); err != nil {
			t.Fatalf("obtain %s through the watched client: got %v, want nil", key, err)
		}
	}
	tracked := len(reg.Locks())
	lc := redislock.New(plain)
	control := make([]*handRefresher, len(cfg.Control))
	for i, key := range cfg.Control {
		l, err := lc.Obtain(ctx, key, cfg.TTL, nil)
		if err != nil {
			t.Fatalf("obtain %s through the unwatched client: got %v, want nil", key, err)
		}
		control[i] = &handRefresher{lock: l, ttl: cfg.TTL, obtained: time.Now()}
	}
	stopControl := make(chan struct{})
	var controlDone sync.WaitGroup
	for _, h := range control {
		controlDone.Add(1)
		go func() {
			defer controlDone.Done()
			h.run(stopControl)
		}()
	}

	// Every lock is held: say so, and wait for the parent's go (it starts
	// the burners of the hold first, if any).
	fmt.Println(holderReady)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("wait for the go on standard input: %v", err)
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ld := startLoad(cfg.Spinners, cfg.AllocRate)
	if path := os.Getenv(traceEnv); path != "" {
		stop, err := startTrace(fmt.Sprintf("%s.%d", path, runtime.GOMAXPROCS(0)))
		if err != nil {
			t.Fatalf("%s: %v", traceEnv, err)
		}
		defer stop()
	}
	holdStart := time.Now()
	timer := time.NewTimer(cfg.Hold)
	<-timer.C
	holdEnd := time.Now()
	stats := wd.Stats()
	spins := ld.stop()
	runtime.ReadMemStats(&after)
	close(stopControl)
	controlDone.Wait()

	var results []lockResult
	for i, l := range held {
		results = append(results, lockResult{Type: "lock", Group: groupWatched, Key: cfg.Watched[i], Release: release(l)})
	}
	for i, h := range control {
		r := lockResult{Type: "lock", Group: groupControl, Key: cfg.Control[i], Release: release(h.lock),
			Refreshes: h.refreshes, RefreshErrs: h.errs, LastErr: h.lastErr, MaxRefreshGap: h.maxGap}
		if !h.lostAt.IsZero() {
			r.Reports = []lossReport{{At: h.lostAt, Kind: "not-obtained", Reason: h.lostErr}}
		}
		results = append(results, r)
	}
	wd.Stop()
	stopped = true
	// Stop waits for queued OnLost calls only up to its timeout; those
	// still queued are made after it returns. Every lock is released or
	// reported by now: give a late call a moment, and count what comes in.
	time.Sleep(200 * time.Millisecond)
	reports, late := snapshot(losses, holdEnd)
	for i := range results {
		if results[i].Group == groupWatched {
			results[i].Reports = reports[results[i].Key]
		}
	}
	sum := holderSummary{
		Type: "summary", GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), Tracked: tracked,
		HoldStart: holdStart, HoldEnd: holdEnd,
		Allocated: after.TotalAlloc - before.TotalAlloc, GCCycles: after.NumGC - before.NumGC,
		GCPause: time.Duration(after.PauseTotalNs - before.PauseTotalNs), Spins: spins, LateOnLost: late,
		Renewals: stats.Renewals, Failures: stats.Failures, RenewErrors: stats.RenewErrors,
		Lost: stats.Lost, Unconfirmed: stats.Unconfirmed, DeadlinesMissed: stats.DeadlinesMissed,
	}
	firstLoss.Do(func() {}) // no OnLost from here on changes it
	sum.MissedAtFirstLoss = missedAtFirstLoss
	if err := writeResults(cfg.Out, results, sum); err != nil {
		t.Fatalf("write results: %v", err)
	}
}

// release releases l with a deadline and says how it went.
func release(l *redislock.Lock) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch err := l.Release(ctx); {
	case err == nil:
		return "ok"
	case errors.Is(err, redislock.ErrLockNotHeld):
		return "not held"
	default:
		return err.Error()
	}
}

func writeResults(path string, results []lockResult, sum holderSummary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := enc.Encode(sum); err != nil {
		_ = f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// snapshot returns the reports of losses by key, and how many were made
// after end.
func snapshot(losses *harness.LostLog, end time.Time) (map[string][]lossReport, int) {
	out := map[string][]lossReport{}
	late := 0
	for _, ev := range losses.All() {
		r := lossReport{At: ev.At, Kind: harness.FirstMatch(ev.Err, "other", lossKinds...), ConfirmedAt: ev.Lock.ConfirmedAt, TTL: ev.Lock.TTL}
		if ev.Err != nil {
			r.Reason = ev.Err.Error()
		}
		out[ev.Lock.Key] = append(out[ev.Lock.Key], r)
		if r.At.After(end) {
			late++
		}
	}
	return out, late
}

// lossKinds are the kinds a loss is reported by, the first matching one.
var lossKinds = []harness.Sentinel{
	{Name: "unreachable", Err: watchdog.ErrUnreachable},
	{Name: "gone", Err: watchdog.ErrLockGone},
	{Name: "taken", Err: watchdog.ErrLockTaken},
	{Name: "max-hold", Err: watchdog.ErrMaxHold},
}

// handRefresher keeps one control lock the way an application without
// lockwatch would: a goroutine of its own refreshing it every TTL/3, and
// giving up when Refresh answers ErrNotObtained. Its fields are written by
// run only, and read once run has returned.
type handRefresher struct {
	lock     *redislock.Lock
	ttl      time.Duration
	obtained time.Time

	refreshes, errs int
	lastErr         string
	maxGap          time.Duration
	lostAt          time.Time
	lostErr         string
}

func (h *handRefresher) run(stop <-chan struct{}) {
	tick := time.NewTicker(h.ttl / 3)
	defer tick.Stop()
	last := h.obtained
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		err := h.lock.Refresh(context.Background(), h.ttl, nil)
		switch {
		case err == nil:
			now := time.Now()
			h.refreshes++
			h.maxGap = max(h.maxGap, now.Sub(last))
			last = now
		case errors.Is(err, redislock.ErrNotObtained):
			h.lostAt, h.lostErr = time.Now(), err.Error()
			return
		default:
			h.errs++
			h.lastErr = err.Error()
		}
	}
}

// load is the CPU and allocation pressure: spinners that burn CPU and
// allocate garbage at a wall-clock rate.
type load struct {
	quit  atomic.Bool
	spins atomic.Int64
	wg    sync.WaitGroup
}

// garbage is 1 KB with one pointer (1016 bytes and the 8-byte header the
// allocator gives objects over 512 bytes that hold pointers, so that
// runtime.MemStats.TotalAlloc counts what the rate asks for): a chain of
// them is something for the collector to mark, not only to sweep.
type garbage struct {
	next *garbage
	//lint:ignore U1000 the padding is the allocation's size
	pad [1008]byte
}

const (
	chainLen = 64 // garbage per chain: 64 KB
	// keepChains is how many chains each spinner keeps alive. One: the
	// garbage dies at once, the heap stays at a few MB and the collector
	// runs some 75 times a second (default GOGC). (Keeping 16 MB alive,
	// 13 collections a second, starved the holder no less: at
	// GOMAXPROCS=1 both groups lost every lock in 4 runs of 4.)
	keepChains = 1
)

// startLoad starts n spinners that together allocate rate bytes a second.
func startLoad(n int, rate int64) *load {
	ld := &load{}
	start := time.Now()
	for range n {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			ld.spin(start, rate/int64(n))
		}()
	}
	return ld
}

// stop ends the spinners, waits for them, and returns how many rounds
// they made.
func (ld *load) stop() int64 {
	ld.quit.Store(true)
	ld.wg.Wait()
	return ld.spins.Load()
}

var sink atomic.Uint64 // keeps the spinners' arithmetic from being optimised away

// spin burns CPU in rounds of some tens of microseconds; after each round
// it allocates whatever its share of the rate asks for by now (64 KB
// chains of 1 KB garbage, the last keepChains chains kept alive). A debt
// of more than 100 ms of allocation, run up while it was not scheduled,
// is forgiven, so that it allocates in bursts but never only allocates.
func (ld *load) spin(start time.Time, rate int64) {
	const chainBytes = chainLen * 1024
	keep := make([]*garbage, keepChains) // read at the end, so that no store to it is optimised away
	var x uint64
	var done int64
	rounds, k := int64(0), 0
	for !ld.quit.Load() {
		for j := 0; j < 20000; j++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		rounds++
		due := int64(time.Since(start).Seconds() * float64(rate))
		if due-done > rate/10 {
			done = due - rate/10
		}
		for ; done < due; done += chainBytes {
			var head *garbage
			for range chainLen {
				head = &garbage{next: head}
			}
			keep[k%len(keep)] = head
			k++
		}
	}
	for _, c := range keep {
		if c != nil {
			x++
		}
	}
	sink.Add(x)
	ld.spins.Add(rounds)
}

// String names the configuration in failure messages.
func (c holderConfig) String() string {
	return fmt.Sprintf("%d watched + %d control locks of %v held %v; %d spinners, %d MB/s of garbage",
		len(c.Watched), len(c.Control), c.TTL, c.Hold, c.Spinners, c.AllocRate>>20)
}
