package watchdog

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

// Observer learns what a watchdog does, as it does it: the metrics modules
// (extra/lockwatchotel, extra/lockwatchprom) are observers. Its methods run
// on the watchdog's goroutines with no lock held; they must be quick, must
// not block and must not call the watchdog. None is called once per
// renewed lock: Renewed reports a whole pipeline, so an observer costs no
// allocation per lock.
type Observer interface {
	// Renewed: a pipeline on endpoint renewed n locks. headroom is the
	// least remaining TTL, as a fraction of the lock's TTL, that any of
	// them had when the renewal was sent (1 means a whole TTL was left).
	Renewed(endpoint string, n int, headroom float64)
	// RenewFailed: calls renew script calls on endpoint failed or were
	// not answered in time; err is the first error. Their locks are
	// retried.
	RenewFailed(endpoint string, calls int, err error)
	// Lost: the watchdog gave a lock up; reason is what OnLost gets. It
	// is called on the goroutine that calls OnLost, before OnLost, one
	// lost lock at a time, in order.
	Lost(l registry.Lock, reason error)
	// Swept: a sweep of endpoint (a tick's, or a Sweep call's) ended after d.
	Swept(endpoint string, d time.Duration)
}

// observers is the list of a watchdog's observers.
type observers struct {
	mu  sync.Mutex
	cur []*observer // replaced, never changed, under mu
}

type observer struct{ o Observer }

// AddObserver adds o to the watchdog's observers and returns a function that
// removes it (idempotent). A nil o is ignored. AddObserver is safe for
// concurrent use; o sees what happens after it was added.
func (w *Watchdog) AddObserver(o Observer) (remove func()) {
	if o == nil || w == nil {
		return func() {}
	}
	entry := &observer{o}
	w.obs.mu.Lock()
	w.obs.cur = append(slices.Clone(w.obs.cur), entry)
	w.obs.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.obs.mu.Lock()
			defer w.obs.mu.Unlock()
			w.obs.cur = slices.DeleteFunc(slices.Clone(w.obs.cur), func(e *observer) bool { return e == entry })
		})
	}
}

// each calls fn for every observer.
func (w *Watchdog) each(fn func(Observer)) {
	w.obs.mu.Lock()
	cur := w.obs.cur
	w.obs.mu.Unlock()
	for _, e := range cur {
		w.observe(fn, e.o)
	}
}

// observe calls fn for one observer, recovering its panic.
func (w *Watchdog) observe(fn func(Observer), o Observer) {
	defer w.recovered("observer")
	fn(o)
}

// observed reports whether the watchdog has observers.
func (w *Watchdog) observed() bool {
	w.obs.mu.Lock()
	defer w.obs.mu.Unlock()
	return len(w.obs.cur) > 0
}

// Reasons a lock is lost, as metrics name them ([Losses]).
const (
	ReasonGone        = "gone"
	ReasonTaken       = "taken"
	ReasonUnreachable = "unreachable"
	ReasonMaxHold     = "max_hold"
	ReasonQuorum      = "quorum"
)

// Reason names the reason err (what OnLost gets) in a word metrics use as
// a label: [ReasonGone], [ReasonTaken], [ReasonUnreachable],
// [ReasonMaxHold], [ReasonQuorum]; "" for an error that is no loss reason.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrQuorumLost):
		return ReasonQuorum
	case errors.Is(err, ErrLockGone):
		return ReasonGone
	case errors.Is(err, ErrLockTaken):
		return ReasonTaken
	case errors.Is(err, ErrUnreachable):
		return ReasonUnreachable
	case errors.Is(err, ErrMaxHold):
		return ReasonMaxHold
	}
	return ""
}

// Losses counts the locks given up, by reason.
type Losses struct {
	Gone, Taken, Unreachable, MaxHold, Quorum int64
}

// count adds one loss for reason.
func (l *Losses) count(reason error) {
	switch Reason(reason) {
	case ReasonQuorum:
		l.Quorum++
	case ReasonGone:
		l.Gone++
	case ReasonTaken:
		l.Taken++
	case ReasonUnreachable:
		l.Unreachable++
	case ReasonMaxHold:
		l.MaxHold++
	}
}

// logging reports whether the watchdog's logger writes records of level.
// The scheduler asks before it logs: the arguments of a record are boxed
// (allocated) even when no handler writes it, and an allocation can draft
// the scheduler into the collector's work, in a process that allocates
// fast while starved of CPU for 100-200 ms (TestStarvedHolder, runtime
// trace, 2026-12-03), while every lock of its lane waits for its next
// pass. The default logger writes nothing.
func (w *Watchdog) logging(level slog.Level) bool {
	return w.o.logger.Enabled(context.Background(), level)
}
