package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/faultproxy"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// workerEnv carries a worker's configuration (JSON) to the re-executed
// test binary; TestHelperWorker runs the worker when it is set.
const workerEnv = "LOCKWATCH_CHAOS_WORKER"

// readyLine is what a worker prints on its standard output once its client
// is watched and its watchdog attached. It then waits for goLine on its
// standard input, works, and stops taking new jobs at end of input.
const (
	readyLine = "CHAOS-WORKER-READY"
	goLine    = "go"
	// partitionLine, followed by a space and a Go duration, tells a worker
	// to cut itself off from every cluster node for that long.
	partitionLine = "partition"
	// contendLine, followed by a space and a Go duration, tells a worker
	// to contend for every key for that long (see worker.contend).
	contendLine = "contend"
)

const (
	// contendEvery is how often a contending worker looks for free keys:
	// as issue 26's contender, which tried the keys every 2 ms.
	contendEvery = 2 * time.Millisecond
)

// workerConfig tells one worker process what to do.
type workerConfig struct {
	Proc       int      `json:"proc"`
	Addrs      []string `json:"addrs"` // cluster nodes
	Keys       []string `json:"keys"`
	Goroutines int      `json:"goroutines"`
	// Watch attaches lockwatch (registry, watchdog, job contexts); without
	// it the worker is the control: the same jobs, nothing renews.
	Watch bool `json:"watch"`
	// TTLs are drawn from [MinTTL, MaxTTL]. A job works for a time drawn
	// from [MinJob, MaxJob], plus the lock's TTL when JobPlusTTL is set
	// (the control's jobs always outlive their TTL).
	MinTTL     time.Duration `json:"min_ttl"`
	MaxTTL     time.Duration `json:"max_ttl"`
	MinJob     time.Duration `json:"min_job"`
	MaxJob     time.Duration `json:"max_job"`
	JobPlusTTL bool          `json:"job_plus_ttl"`
	Journal    string        `json:"journal"`
	Log        string        `json:"log"` // the watchdog's slog output
	Seed       uint64        `json:"seed"`
}

// Bounds of one Redis call of a job (obtain, release): a hang guard, not a
// timing assertion.
const callTimeout = 2 * time.Second

// TestHelperWorker is a worker process of TestChaos: the test binary
// re-executed with workerEnv set. Run on its own, it skips.
func TestHelperWorker(t *testing.T) {
	spec, ok := os.LookupEnv(workerEnv)
	if !ok {
		t.Skip("a worker process of TestChaos; it runs only when " + workerEnv + " is set")
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatalf("%s: %v", workerEnv, err)
	}
	if err := runWorker(t, cfg, os.Stdin, os.Stdout); err != nil {
		t.Fatalf("worker %d: %v", cfg.Proc, err)
	}
}

// worker is one worker process's state.
type worker struct {
	cfg workerConfig
	j   *journal
	cc  *redis.ClusterClient
	wd  *watchdog.Watchdog // nil for the control
	rl  *redislock.Client
	rs  *redsync.Redsync

	jobs, notObtained, obtainErrs atomic.Int64

	errMu   sync.Mutex     // guards errKind
	errKind map[string]int // obtain errors by text, numbers and addresses elided

	// proxies stand, in this process, for every cluster node: the
	// cluster client dials a node's proxy instead of the node (dial), so
	// that the parent can cut this process off (partition) without
	// touching the others. directDials counts dials of an address no
	// proxy stands for.
	proxies     map[string]*faultproxy.Proxy
	directDials atomic.Int64
	contended   atomic.Int64 // jobs of contend
}

// dial is the cluster client's dialer: it connects to the fault proxy of
// the node at addr. go-redis learns the nodes' addresses from the cluster
// (CLUSTER SLOTS, MOVED and ASK name the nodes' own addresses), so the
// proxies cannot simply be handed to it as the cluster's addresses; the
// dialer keeps every name as the cluster gives it and changes only where
// the connection goes. (A node that is down is seen as a connection reset,
// not refused: its proxy accepts, fails to reach the node, and resets.)
func (w *worker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p := w.proxies[addr]; p != nil {
		addr = p.Addr()
	} else {
		w.directDials.Add(1)
	}
	d := net.Dialer{Timeout: time.Second}
	return d.DialContext(ctx, network, addr)
}

// partition cuts the process off from every node for d: its proxies
// forward nothing, either way, and discard what they read, then heal on
// their own.
func (w *worker) partition(d time.Duration) {
	for _, p := range w.proxies {
		p.Blackhole(d)
	}
}

// refused reports whether an obtain failed only because the key was held.
func refused(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redislock.ErrNotObtained) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
}

// notHeld reports whether a release failed because the lock was no longer
// held (expired, or another owner's), not because Redis could not answer.
func notHeld(err error) bool {
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redislock.ErrLockNotHeld) || errors.Is(err, redsync.ErrLockAlreadyExpired) ||
		errors.As(err, &nodeTaken) || errors.Is(err, harness.ErrUnlockFalse)
}

var digits = regexp.MustCompile(`[0-9]+`)

func (w *worker) noteObtainErr(err error) {
	text := digits.ReplaceAllString(strings.Join(strings.Fields(err.Error()), " "), "N")
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.errKind == nil {
		w.errKind = map[string]int{}
	}
	if len(w.errKind) < 20 || w.errKind[text] > 0 {
		w.errKind[text]++
	}
}

// runWorker sets the worker up as an application would (the README's
// start-up contract on a cluster client), prints readyLine, waits for
// goLine on in, runs cfg.Goroutines job loops until in ends, lets the
// jobs in progress finish, and tears everything down.
func runWorker(t *testing.T, cfg workerConfig, in io.Reader, out io.Writer) error {
	j, err := createJournal(cfg.Journal, cfg.Proc)
	if err != nil {
		return err
	}
	logFile, err := os.Create(cfg.Log)
	if err != nil {
		return err
	}
	defer logFile.Close()
	w := &worker{cfg: cfg, j: j, proxies: map[string]*faultproxy.Proxy{}}
	// The proxies close after the client (deferred first).
	defer func() {
		for _, p := range w.proxies {
			_ = p.Close()
		}
	}()
	for _, addr := range cfg.Addrs {
		p, err := faultproxy.New(addr)
		if err != nil {
			return err
		}
		w.proxies[addr] = p
	}
	w.cc = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cfg.Addrs,
		Dialer:       w.dial,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
	})
	defer w.cc.Close()
	if cfg.Watch {
		reg := harness.Watch(t, w.cc)
		logger := slog.New(schedulerTap{slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}), j})
		onLost := func(l registry.Lock, err error) {
			j.write(record{Kind: recLost, Key: l.Key, Value: l.Value, At: nanos(time.Now()), Cause: err.Error(), CauseClass: causeClass(err)})
			logger.Warn("chaos worker: OnLost", "key", l.Key, "value", l.Value, "err", err)
		}
		if w.wd, err = watchdog.Attach(reg, watchdog.WithOnLost(onLost), watchdog.WithLogger(logger)); err != nil {
			return fmt.Errorf("watchdog.Attach: %w", err)
		}
	}
	w.rl = redislock.New(w.cc)
	w.rs = redsync.New(goredis.NewPool(w.cc))

	// Until the parent says go, nothing is sent: every worker starts at once.
	goCh, stopCh := make(chan struct{}), make(chan struct{})
	stopCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var readerDone, contenders sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		defer close(stopCh)
		sc := bufio.NewScanner(in)
		started, rounds := false, 0
		for sc.Scan() {
			if sc.Text() == goLine && !started {
				started = true
				close(goCh)
			}
			if v, ok := strings.CutPrefix(sc.Text(), partitionLine+" "); ok {
				if d, err := time.ParseDuration(v); err == nil && d > 0 {
					w.partition(d)
				}
			}
			if v, ok := strings.CutPrefix(sc.Text(), contendLine+" "); ok && started {
				if d, err := time.ParseDuration(v); err == nil && d > 0 {
					rounds++
					contenders.Add(1)
					go func(round int) {
						defer contenders.Done()
						w.contend(stopCtx, d, round, &contenders)
					}(rounds)
				}
			}
		}
		if !started {
			close(goCh)
		}
	}()
	if _, err := fmt.Fprintln(out, readyLine); err != nil {
		return err
	}
	<-goCh

	meter := lagmeter.Start(t)
	// Apart, every thread of the process: a thread the host does not run
	// keeps its goroutine, and any lock that goroutine holds (the table
	// lock every pass of the watchdog's scheduler takes), while the
	// meter's goroutine is woken on time on another one (stop 45's CI: a
	// partitioned worker's job told 334 ms after E, its meter on time).
	threads := lagmeter.New(lagmeter.Config{Tick: 10 * time.Millisecond, Notable: 10 * time.Millisecond, Keep: 10 * time.Second, Threads: true})
	defer threads.Stop()
	lagStop := make(chan struct{})
	var lagDone sync.WaitGroup
	lagDone.Add(1)
	go func() {
		defer lagDone.Done()
		w.journalLag(lagStop, meter, threads)
	}()

	go func() {
		<-stopCh
		stop()
	}()
	var loops sync.WaitGroup
	for g := range cfg.Goroutines {
		loops.Add(1)
		go func() {
			defer loops.Done()
			w.loop(stopCtx, g)
		}()
	}
	loops.Wait()
	readerDone.Wait()
	contenders.Wait()
	stop()
	close(lagStop)
	lagDone.Wait()

	var st watchdog.Stats
	if w.wd != nil {
		st = w.wd.Stats()
		w.wd.Stop()
	}
	w.errMu.Lock()
	j.write(record{Kind: recSummary, At: nanos(time.Now()), Jobs: int(w.jobs.Load()), NotObtained: int(w.notObtained.Load()), ObtainErrs: int(w.obtainErrs.Load()), ErrKinds: w.errKind, Renewals: st.Renewals, Unconfirmed: st.Unconfirmed, ToldLate: st.ToldLate, Missed: st.DeadlinesMissed, DirectDials: int(w.directDials.Load()), Contended: int(w.contended.Load())})
	w.errMu.Unlock()
	return j.close()
}

// contend, for d or until ctx ends, reads whether every key exists every
// contendEvery (one pipeline through the cluster client) and tries at once
// to obtain each key it finds free, as a client waiting for those keys
// would. The parent makes the other workers contend while it partitions
// one: the cut-off worker's keys are then taken within a few milliseconds
// of their expiry, and a job of it told after that overlaps (issue 26:
// a cut-off holder was told 0.5-33 ms after another client could take its
// key; the soak's own goroutines, pausing 10-60 ms after a refusal and
// trying a random key of 40, take a freed key some 15-300 ms after it is
// free). Each key it obtains is a job like any other (owner
// "p<process>.c<round>.s<seq>"), on a goroutine of its own counted in
// jobs: as many at once as it holds keys.
func (w *worker) contend(ctx context.Context, d time.Duration, round int, jobs *sync.WaitGroup) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Proc)<<16|uint64(0x8000+round)))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	tick := time.NewTicker(contendEvery)
	defer tick.Stop()
	seq := 0
	cmds := make([]*redis.IntCmd, len(w.cfg.Keys))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pipe := w.cc.Pipeline()
		for i, k := range w.cfg.Keys {
			cmds[i] = pipe.Exists(ctx, k)
		}
		_, _ = pipe.Exec(ctx) // each command's error is looked at below
		for i, c := range cmds {
			if c.Err() != nil || c.Val() != 0 {
				continue
			}
			key := w.cfg.Keys[i]
			ttl := between(w.cfg.MinTTL, w.cfg.MaxTTL).Round(time.Millisecond)
			plan := between(w.cfg.MinJob, w.cfg.MaxJob)
			if w.cfg.JobPlusTTL {
				plan += ttl
			}
			lib := harness.Redislock
			if rng.IntN(2) == 1 {
				lib = harness.Redsync
			}
			h, err := w.obtain(lib, key, ttl)
			if err != nil {
				if refused(err) {
					w.notObtained.Add(1)
				} else {
					w.obtainErrs.Add(1)
					w.noteObtainErr(err)
				}
				continue
			}
			seq++
			owner := fmt.Sprintf("p%d.c%02d.s%d", w.cfg.Proc, round, seq)
			jobs.Add(1)
			go func() {
				defer jobs.Done()
				w.job(h, owner, lib, key, ttl, plan)
				w.jobs.Add(1)
				w.contended.Add(1)
			}()
		}
	}
}

// journalLag writes, every 20 ms, the worst lateness the lag meters
// measured since the last look, when it is notable: the process, or one
// of its threads, was not running (a loaded machine, or the parent's
// SIGSTOP) for that long somewhere between the last look, less that
// lateness, and now.
func (w *worker) journalLag(stop <-chan struct{}, ms ...*lagmeter.Meter) {
	const every, notable = 20 * time.Millisecond, 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		late := time.Duration(0)
		for _, m := range ms {
			late = max(late, m.Since(prev))
		}
		if late >= notable {
			w.j.write(record{Kind: recLag, From: nanos(prev.Add(-late)), At: nanos(now), Late: int64(late)})
		}
		prev = now
	}
}

// loop takes jobs until ctx ends: a random key, a random library, a
// random TTL; a key it cannot obtain is tried again (another key, perhaps)
// after a short pause.
func (w *worker) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Proc)<<16|uint64(g)))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	seq := 0
	for ctx.Err() == nil {
		key := w.cfg.Keys[rng.IntN(len(w.cfg.Keys))]
		ttl := between(w.cfg.MinTTL, w.cfg.MaxTTL).Round(time.Millisecond)
		plan := between(w.cfg.MinJob, w.cfg.MaxJob)
		if w.cfg.JobPlusTTL {
			plan += ttl
		}
		lib := harness.Redislock
		if rng.IntN(2) == 1 {
			lib = harness.Redsync
		}
		h, err := w.obtain(lib, key, ttl)
		if err != nil {
			if refused(err) {
				w.notObtained.Add(1)
			} else {
				w.obtainErrs.Add(1)
				w.noteObtainErr(err)
			}
			sleepCtx(ctx, between(10*time.Millisecond, 60*time.Millisecond))
			continue
		}
		seq++
		w.job(h, fmt.Sprintf("p%d.g%02d.s%d", w.cfg.Proc, g, seq), lib, key, ttl, plan)
		w.jobs.Add(1)
	}
}

func (w *worker) obtain(lib, key string, ttl time.Duration) (*harness.Held, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if lib == harness.Redislock {
		l, err := w.rl.Obtain(ctx, key, ttl, nil)
		if err != nil {
			return nil, err
		}
		return harness.HeldRedislock(l, ttl), nil
	}
	m := w.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return harness.HeldRedsync(m, ttl), nil
}

// job works on key for plan, under the watchdog's context for the lock
// (with lockwatch), and stops at once when that context is cancelled. It
// journals its start before working and its end (with the cancellation, if
// any) once it has stopped and released.
func (w *worker) job(h *harness.Held, owner, lib, key string, ttl, plan time.Duration) {
	start := time.Now()
	w.j.write(record{Kind: recStart, Owner: owner, Key: key, Lib: lib, Value: h.Value, TTL: int64(ttl), Plan: int64(plan), At: nanos(start)})
	jobCtx, cancel := context.Background(), context.CancelFunc(func() {})
	if w.wd != nil {
		jobCtx, cancel = w.wd.Context(context.Background(), key)
	}
	// The time the context was cancelled, as soon as this process could
	// see it (an AfterFunc runs on its own goroutine, so that it does not
	// wait for this one to be scheduled).
	var cancelledAt atomic.Int64
	stopAfter := context.AfterFunc(jobCtx, func() { cancelledAt.CompareAndSwap(0, nanos(time.Now())) })
	timer := time.NewTimer(plan)
	select {
	case <-timer.C:
	case <-jobCtx.Done():
	}
	end := time.Now()
	timer.Stop()
	rec := record{Kind: recEnd, Owner: owner, Key: key, At: nanos(end)}
	if jobCtx.Err() != nil {
		cause := context.Cause(jobCtx)
		at := cancelledAt.Load()
		if at == 0 || at > rec.At {
			at = rec.At
		}
		rec.CancelAt, rec.Cause, rec.CauseClass = at, cause.Error(), causeClass(cause)
	}
	stopAfter()
	cancel()
	ctx, cancelRelease := context.WithTimeout(context.Background(), callTimeout)
	if err := h.Release(ctx); err != nil {
		rec.Release, rec.ReleaseClass = err.Error(), "error"
		if notHeld(err) {
			rec.ReleaseClass = "not-held"
		}
	}
	cancelRelease()
	w.j.write(rec)
}

// Classes of a job context's cause or an OnLost reason. The loss classes
// tell the holder it no longer holds its lock ("told", in the checker's
// words); the others do not.
var lossClasses = map[string]bool{"taken": true, "gone": true, "quorum": true, "lost": true, "unreachable": true, "maxhold": true, "unconfirmed": true}

// causeClasses name a job context's cause or an OnLost reason, the first
// that matches. The order matters: ErrLockTaken and ErrLockGone match
// ErrLost, and on some versions ErrUnreachable does too.
// "unconfirmed" (watchdog.ErrUnconfirmed: no renewal confirmed in time,
// the lock may be lost) comes before "lost", which it matches too: such a
// job is told, and the soak counts those cancellations apart.
var causeClasses = []harness.Sentinel{
	{Name: "taken", Err: watchdog.ErrLockTaken},
	{Name: "gone", Err: watchdog.ErrLockGone},
	{Name: "quorum", Err: watchdog.ErrQuorumLost},
	{Name: "unreachable", Err: watchdog.ErrUnreachable},
	{Name: "maxhold", Err: watchdog.ErrMaxHold},
	{Name: "unconfirmed", Err: watchdog.ErrUnconfirmed},
	{Name: "lost", Err: watchdog.ErrLost},
	{Name: "released", Err: watchdog.ErrReleased},
	{Name: "stopped", Err: watchdog.ErrStopped},
	{Name: "not-tracked", Err: watchdog.ErrNotTracked},
	{Name: "canceled", Err: context.Canceled},
}

// causeClass names err's class (see causeClasses); "" for nil.
func causeClass(err error) string {
	if err == nil {
		return ""
	}
	return harness.FirstMatch(err, "other", causeClasses...)
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// schedulerTap passes the watchdog's log on, and journals as the process's
// lag how late the watchdog's scheduler woke whenever it tells a holder
// after its lock's deadline (the scheduler_woke_late of that line): a
// stall of the goroutine that tells, which the lag meters' goroutines,
// woken on other threads, may not see (in CI run 167 here a worker's
// scheduler of reliability/exclusion woke 105 ms late while its meters,
// threads included, measured 61 ms).
type schedulerTap struct {
	slog.Handler
	j *journal
}

func (h schedulerTap) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "watchdog: holders told after") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key != "scheduler_woke_late" {
				return true
			}
			if d := a.Value.Duration(); a.Value.Kind() == slog.KindDuration && d > 0 {
				h.j.write(record{Kind: recLag, From: nanos(r.Time.Add(-d)), At: nanos(r.Time), Late: int64(d)})
			}
			return false
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h schedulerTap) WithAttrs(as []slog.Attr) slog.Handler {
	return schedulerTap{h.Handler.WithAttrs(as), h.j}
}

func (h schedulerTap) WithGroup(name string) slog.Handler {
	return schedulerTap{h.Handler.WithGroup(name), h.j}
}
