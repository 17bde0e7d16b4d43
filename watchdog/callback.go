package watchdog

import (
	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/registry"
)

// User code (the filter, OnLost, observers, the registry's subscribers)
// runs with no lockwatch lock held, and its panics are recovered, logged
// and counted (Stats.CallbackPanics): a callback cannot hang the
// application's lock commands or crash the process.

// recovered is deferred around a call of user code named what.
func (w *Watchdog) recovered(what string) {
	if p := recover(); p != nil {
		w.panicked(what, p)
	}
}

// panicked counts and logs a panic of user code.
func (w *Watchdog) panicked(what string, p any) {
	w.panics.Add(1)
	w.o.logger.Error("watchdog: a callback panicked; recovered", "callback", what, "panic", p)
}

// filtered reports whether the filter refuses e (or has not judged it
// yet: the hook judges a new lock right after tracking it, adopt the
// locks tracked before); the table must be locked.
func (w *Watchdog) filtered(t *table.Table, e *table.Entry) bool {
	if w.o.filter == nil {
		return false
	}
	ok, known := t.VerdictLocked(e)
	return !known || !ok
}

// judge asks the filter about e once, with no lock held, and keeps its
// verdict in the table; it returns whether e is to be renewed. A
// panicking filter is counted and its lock renewed, as without a filter.
func (w *Watchdog) judge(t *table.Table, e *table.Entry) bool {
	t.Lock()
	if e.Detached() {
		t.Unlock()
		return false
	}
	if ok, known := t.VerdictLocked(e); known {
		t.Unlock()
		return ok
	}
	info := t.InfoLocked(e)
	t.Unlock()
	ok := w.callFilter(lockOf(info))
	t.Lock()
	t.SetVerdictLocked(e, ok)
	t.Unlock()
	return ok
}

// judgeAll judges every lock of t the filter has no verdict on (the locks
// tracked before the watchdog saw t's client).
func (w *Watchdog) judgeAll(t *table.Table) {
	if w.o.filter == nil {
		return
	}
	var es []*table.Entry
	t.Each(func(e *table.Entry) {
		if _, known := t.VerdictLocked(e); !known {
			es = append(es, e)
		}
	})
	for _, e := range es {
		w.judge(t, e)
	}
}

// callFilter runs the user's filter on l.
func (w *Watchdog) callFilter(l registry.Lock) (ok bool) {
	ok = true
	defer w.recovered("filter")
	return w.o.filter(l)
}
