package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockwatch/lockwatch/registry"
)

// probeTimeout bounds all adapter probes of one Attach. Probes talk to an
// in-process fake, so this is only a guard against a stuck adapter.
const probeTimeout = 10 * time.Second

// attached holds the registries that have a running watchdog.
var attached sync.Map // *registry.Registry -> struct{}

// Watchdog renews the locks a [registry.Registry] tracks, on a cron schedule
// and, for locks whose TTL is short against the schedule, in a fast lane
// between ticks.
//
// A Watchdog is safe for concurrent use. The zero value is not usable: call
// [Attach].
type Watchdog struct {
	reg   *registry.Registry
	o     options
	sched cron.Schedule
	cron  *cron.Cron

	ctx    context.Context // cancelled by Stop; parent of every renewal
	cancel context.CancelFunc
	unsub  func()
	wg     sync.WaitGroup // the fast lane and every sweep in flight

	mu       sync.Mutex            // guards fast, armed and stopping
	fast     map[lockRef]time.Time // fast-lane locks -> no retry before this time
	armed    time.Time             // when the fast lane's timer fires; zero when idle
	stopping bool
	poke     chan struct{} // buffered 1: wakes the fast lane to re-plan

	stopOnce sync.Once
	done     chan struct{} // closed when Stop has finished

	sweeps, renewals, lost, failures atomic.Int64
	plans                            atomic.Int64 // fast-lane re-plans, for tests
}

type lockRef struct {
	c   redis.UniversalClient
	key string
}

// Attach checks that the upstream libraries behind reg's adapters send only
// scripts lockwatch knows (each adapter's probe runs first; a mismatch is an
// error wrapping [registry.ErrUpstreamChanged]), then starts renewing the
// locks reg tracks. Call [Watchdog.Stop] to stop it.
//
// Attach validates its input: a nil registry ([ErrNilRegistry]), a registry
// without adapters ([ErrNoAdapters]), a bad schedule, a bad option value and
// a registry that already has a running watchdog ([ErrAttached]) are errors.
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
	adapters := reg.Adapters()
	if len(adapters) == 0 {
		return nil, ErrNoAdapters
	}
	sched, err := parseSchedule(o.schedule)
	if err != nil {
		return nil, err
	}
	if err := probeAll(adapters); err != nil {
		return nil, err
	}
	if _, busy := attached.LoadOrStore(reg, struct{}{}); busy {
		return nil, ErrAttached
	}

	ctx, cancel := context.WithCancel(context.Background())
	w := &Watchdog{
		reg:    reg,
		o:      o,
		sched:  sched,
		ctx:    ctx,
		cancel: cancel,
		fast:   make(map[lockRef]time.Time),
		poke:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	log := cronLogger{o.logger}
	w.cron = cron.New(
		cron.WithParser(specParser),
		cron.WithLogger(log),
		cron.WithChain(cron.Recover(log), cron.SkipIfStillRunning(log)),
	)
	w.cron.Schedule(sched, cron.FuncJob(w.tick))
	w.unsub = reg.Subscribe(w.onEvent)
	w.adoptTracked(time.Now())
	w.wg.Add(1)
	go w.fastLane()
	w.cron.Start()
	o.logger.Info("watchdog: attached", "schedule", o.schedule, "max_hold", o.maxHold, "tracked", reg.Len())
	return w, nil
}

// probeAll runs every adapter's probe; a panicking probe is an error.
func probeAll(adapters []registry.Adapter) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	for _, a := range adapters {
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("watchdog: probe of adapter %s panicked: %v", a.Name(), p)
				}
			}()
			if perr := a.Probe(ctx); perr != nil {
				err = fmt.Errorf("watchdog: adapter %s: %w", a.Name(), perr)
			}
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the schedule and the fast lane, cancels renewals in flight and
// returns when none is left running; no goroutine of the watchdog outlives
// it. Tracked locks stay in the registry and expire within their TTL unless
// their holders refresh them or another watchdog is attached. Stop is
// idempotent and safe to call from several goroutines.
func (w *Watchdog) Stop() {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		w.unsub()
		jobs := w.cron.Stop()
		w.cancel()
		<-jobs.Done()
		w.wg.Wait()
		attached.Delete(w.reg)
		w.o.logger.Info("watchdog: stopped")
		close(w.done)
	})
	<-w.done
}

// begin registers a sweep; it fails once Stop has begun.
func (w *Watchdog) begin() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return false
	}
	w.wg.Add(1)
	return true
}

// Sweep renews every tracked lock now, as a tick does, and returns when the
// sweep is done. It returns [ErrStopped] after Stop, ctx's error if ctx ends
// first, or an error joining the renewal errors of the sweep (locks whose
// renewal failed are retried by the fast lane, as after a tick).
func (w *Watchdog) Sweep(ctx context.Context) error {
	if !w.begin() {
		return ErrStopped
	}
	defer w.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(w.ctx, cancel)
	defer stop()
	errs := w.sweep(ctx, time.Now(), nil)
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func (w *Watchdog) tick() {
	if !w.begin() {
		return
	}
	defer w.wg.Done()
	w.sweep(w.ctx, time.Now(), nil)
}

// Stats is a snapshot of a watchdog's counters.
type Stats struct {
	// Sweeps counts finished sweeps: ticks, fast-lane rounds and Sweep calls.
	Sweeps int64
	// Renewals counts locks renewed.
	Renewals int64
	// Lost counts locks reported to OnLost, whatever the reason.
	Lost int64
	// Failures counts renew script calls that failed (and were retried).
	Failures int64
	// FastLane is the number of locks renewed between ticks right now.
	FastLane int
}

// Stats returns the watchdog's counters.
func (w *Watchdog) Stats() Stats {
	w.mu.Lock()
	fast := len(w.fast)
	w.mu.Unlock()
	return Stats{
		Sweeps:   w.sweeps.Load(),
		Renewals: w.renewals.Load(),
		Lost:     w.lost.Load(),
		Failures: w.failures.Load(),
		FastLane: fast,
	}
}
