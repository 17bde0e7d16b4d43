package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/registry"
)

// probeTimeout bounds all adapter probes of one Attach. Probes talk to an
// in-process fake, so this is only a guard against a stuck adapter.
const probeTimeout = 10 * time.Second

// maxFirstTick is the longest a schedule may take to its first activation.
const maxFirstTick = 366 * 24 * time.Hour

// attached holds the registries that have a running watchdog.
var attached sync.Map // *registry.Registry -> struct{}

// Watchdog renews the locks a [registry.Registry] tracks, on a cron schedule
// and, for locks whose TTL is short against the schedule, in a fast lane
// between ticks. Each Redis endpoint (a watched client, or a master node of
// a cluster client) is served by a lane of its own, so that a fault on one
// endpoint delays no renewal on another.
//
// A Watchdog is safe for concurrent use. The zero value is not usable: call
// [Attach].
type Watchdog struct {
	runWait runWait      // how long goroutines wait for a CPU lately (unreadSent)
	wakeLag atomic.Int64 // how late goroutines are woken lately, in ns (probeWakes)
	reg     *registry.Registry
	set     *table.Set
	o       options
	sched   cron.Schedule
	cron    *cron.Cron

	ctx    context.Context // cancelled by Stop; parent of every renewal
	cancel context.CancelFunc

	mu       sync.Mutex // guards clients and stopping
	clients  map[*table.Table]*client
	stopping bool
	view     atomic.Pointer[map[*table.Table]*client] // clients, read by the hook without a lock

	nextTick atomic.Int64 // the next tick, in ns since the set's epoch

	loops sync.WaitGroup // lanes' and routers' goroutines; Add only through addLoops
	// loopsMu guards loopsShut: once Stop has begun waiting for loops, no
	// goroutine is added to it (a WaitGroup must not grow from zero while
	// Wait runs: a settling renewal's client check, or a cluster node's new
	// lane, did, and panicked Stop).
	loopsMu   sync.Mutex
	loopsShut bool
	io        sync.WaitGroup // senders (pipelines in flight, until go-redis returns) and dial probes
	senders   chan *pipe     // calls handed to a sender that waits for one (Watchdog.sender)
	rep       *reporter

	stopOnce sync.Once
	done     chan struct{} // closed when Stop has finished

	ticks, sweeps, renewals, lost, failures atomic.Int64
	renewErrors                             atomic.Int64 // failed renew script calls
	missed, hedges, unconfirmed, spareCalls atomic.Int64 // see Stats
	toldLate                                atomic.Int64 // see Stats
	panics                                  atomic.Int64 // user callbacks' panics recovered
	obs                                     observers

	lossMu sync.Mutex // guards losses
	losses Losses

	contexts contexts // what Context handed out
}

// Attach checks that the upstream libraries behind reg's adapters send only
// scripts lockwatch knows (each adapter's probe runs first; a mismatch is an
// error wrapping [registry.ErrUpstreamChanged]), then starts renewing the
// locks reg tracks. Call [Watchdog.Stop] to stop it.
//
// Attach refuses what cannot work: a nil registry ([ErrNilRegistry]), a
// registry without adapters ([ErrNoAdapters]), a schedule that does not
// parse or never fires within a year, an option value that cannot keep a
// lock alive (see each option), and a registry that already has a running
// watchdog ([ErrAttached]).
func Attach(reg *registry.Registry, opts ...Option) (*Watchdog, error) {
	if reg == nil {
		return nil, ErrNilRegistry
	}
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("watchdog: option %d is nil", i)
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	set := table.SetOf(reg)
	if set == nil || len(set.Names) == 0 {
		return nil, ErrNoAdapters
	}
	if len(set.Names) > table.MaxAdapters {
		return nil, fmt.Errorf("watchdog: the registry has %d adapters, at most %d are supported", len(set.Names), table.MaxAdapters)
	}
	sched, err := parseSchedule(o.schedule)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if next := sched.Next(now); next.IsZero() || next.Sub(now) > maxFirstTick {
		return nil, fmt.Errorf("watchdog: WithSchedule(%q): the schedule has no activation within a year", o.schedule)
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	err = set.Probe(ctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if _, busy := attached.LoadOrStore(reg, struct{}{}); busy {
		return nil, ErrAttached
	}

	// Every command the watchdog sends is its own: none is a holder's lock
	// command for the registry's hook to track. Made so once, a renew
	// call's context costs no allocation for it (table.WithoutTracking).
	ctx, cancel = context.WithCancel(table.WithoutTracking(context.Background()))
	w := &Watchdog{
		reg:     reg,
		set:     set,
		o:       o,
		sched:   sched,
		ctx:     ctx,
		cancel:  cancel,
		clients: make(map[*table.Table]*client),
		done:    make(chan struct{}),
		senders: make(chan *pipe),
	}
	w.rep = newReporter(w)
	w.nextTick.Store(w.set.Since(sched.Next(now)))
	w.publish()
	log := cronLogger{o.logger}
	w.cron = cron.New(
		cron.WithParser(specParser),
		cron.WithLogger(log),
		cron.WithChain(cron.Recover(log), cron.SkipIfStillRunning(log)),
	)
	w.cron.Schedule(sched, cron.FuncJob(w.tick))
	w.set.Observe(tableObserver{w})
	w.set.OnPanic(func(what string, p any) {
		o.logger.Error("watchdog: a callback panicked; recovered", "callback", what, "panic", p)
	})
	w.adopt(now)
	if w.addLoops(1) {
		go w.probeWakes()
	}
	w.cron.Start()
	o.logger.Info("watchdog: attached", "schedule", o.schedule, "max_hold", o.maxHold, "tracked", reg.Len())
	return w, nil
}

// Stop stops the schedule and every lane, gives up renewals in flight and
// returns; no lock is renewed after it. It waits at most the stop timeout
// ([WithStopTimeout], default [DefaultStopTimeout]) for pipelines already
// sent to answer and for queued OnLost calls: against a stalled server, a
// pipeline ends on its own later (when go-redis's read timeout passes) and
// changes nothing. Tracked locks stay in the registry and expire within
// their TTL unless their holders refresh them or another watchdog is
// attached. Stop is idempotent and safe to call from several goroutines;
// on a nil *Watchdog it does nothing.
func (w *Watchdog) Stop() {
	if w == nil {
		return // the error path of wd, err := Attach(...)
	}
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		w.set.Observe(nil)
		w.set.OnPanic(nil)
		jobs := w.cron.Stop()
		w.cancel()
		w.contexts.stopAll(ErrStopped)
		<-jobs.Done()
		w.loopsMu.Lock()
		w.loopsShut = true
		w.loopsMu.Unlock()
		w.loops.Wait()
		for _, t := range w.set.Tables() {
			t.ForgetLanes() // for the next watchdog
		}
		io := make(chan struct{})
		go func() {
			w.io.Wait()
			close(io)
		}()
		deadline, cancel := context.WithTimeout(context.Background(), w.o.stopWait)
		defer cancel()
		select {
		case <-io:
			w.closeSpares()
		case <-deadline.Done():
			go func() { // the calls end soon: their context is done
				<-io
				w.closeSpares()
			}()
		}
		for _, t := range w.set.Tables() {
			// A pipeline that has not ended by now no longer holds up the
			// holders' commands.
			t.EndAllLate()
		}
		select {
		case <-w.rep.drained():
		case <-deadline.Done():
			w.o.logger.Warn("watchdog: stopped before every OnLost call returned; the rest run after Stop")
		}
		attached.Delete(w.reg)
		w.o.logger.Info("watchdog: stopped")
		close(w.done)
	})
	<-w.done
}

// addLoops adds n goroutines to w.loops and reports true, or reports
// false once Stop has begun waiting for them: the caller then starts none.
func (w *Watchdog) addLoops(n int) bool {
	w.loopsMu.Lock()
	defer w.loopsMu.Unlock()
	if w.loopsShut {
		return false
	}
	w.loops.Add(n)
	return true
}

// request follows one sweep asked of every endpoint: a tick's or Sweep's.
type request struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (r *request) finish(err error) {
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
	r.wg.Done()
}

// Sweep renews every tracked lock now, as a tick does, and returns when
// every endpoint has answered or given its renewals up. It returns
// [ErrStopped] when Stop has begun (also for a Sweep that Stop ends),
// ctx's error if ctx ends first, or an error
// joining the renewal errors of the sweep (locks whose renewal failed are
// retried, as after a tick).
func (w *Watchdog) Sweep(ctx context.Context) error {
	if w == nil {
		return ErrNilWatchdog
	}
	w.mu.Lock()
	stopping := w.stopping
	w.mu.Unlock()
	if stopping {
		return ErrStopped
	}
	r := &request{}
	w.askAll(r)
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	if d := sweepWaitDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		return ErrStopped
	}
	r.mu.Lock()
	err := errors.Join(r.errs...)
	r.mu.Unlock()
	if err != nil && w.ctx.Err() != nil {
		// Stop came while its calls waited for Redis: Stop's cancellation
		// ended them, not Redis. A caller woken late finds both the sweep
		// ended and the watchdog stopped, and select picks either (CI run
		// 78 beside two CPU burners: "context canceled").
		return ErrStopped
	}
	return err
}

// sweepWaitDelay is how long Sweep waits before it looks whether its
// sweep ended, for tests only (export_test.go): a caller starved of CPU is
// woken late.
var sweepWaitDelay atomic.Int64

// tick is the cron job: it asks every endpoint for a sweep and returns at
// once; the lanes sweep on their own goroutines.
func (w *Watchdog) tick() {
	w.ticks.Add(1)
	now := time.Now()
	w.nextTick.Store(w.set.Since(w.sched.Next(now)))
	w.askAll(nil)
}

func (w *Watchdog) askAll(r *request) {
	w.adopt(time.Now())
	for _, c := range w.clientList() {
		c.ask(r)
	}
}

// nextTickNs returns the next tick after at (ns since the set's epoch).
func (w *Watchdog) nextTickNs(at int64) int64 {
	if next := w.nextTick.Load(); next > at {
		return next
	}
	return w.set.Since(w.sched.Next(w.set.At(at)))
}

func (w *Watchdog) maxHoldNs() int64 { return int64(w.o.maxHold) }

// pipelineDeadline is the context deadline of a pipeline the watchdog
// hedges after timeout: longer, because a new connection's handshake takes
// a few round trips, and a client with ContextTimeoutEnabled would
// otherwise kill it half-way on a slow network, again on every retry; and
// its answer, however late, is still applied.
func pipelineDeadline(timeout time.Duration) time.Duration {
	return max(4*timeout, time.Second)
}

// report queues losses for OnLost (and logs them at once).
func (w *Watchdog) report(ls ...loss) { w.rep.add(ls...) }

// lockOf turns a table snapshot into the registry's Lock.
func lockOf(i table.Info) registry.Lock {
	return registry.Lock{
		Client:      i.Client,
		Key:         i.Key,
		Keys:        i.Keys,
		Value:       i.Value,
		TTL:         i.TTL,
		Source:      i.Source,
		ObtainedAt:  i.ObtainedAt,
		ConfirmedAt: i.ConfirmedAt,
		Renewals:    i.Renewals,
	}
}
