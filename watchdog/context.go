package watchdog

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// Context returns a context derived from parent that is cancelled when the
// lock tracked under key stops being held; context.Cause tells why:
//
//   - the loss reasons OnLost gets: [ErrLockGone], [ErrLockTaken], an
//     [*UnreachableError] ([ErrUnreachable]), [ErrMaxHold], and for a
//     redsync mutex over several servers [ErrQuorumLost] (losing a copy while
//     a majority still holds it does not cancel it);
//   - [ErrReleased]: the holder released the lock (or [ErrLost] when the
//     holder's own refresh found it no longer held);
//   - an [*UnconfirmedError] ([ErrUnconfirmed]): no renewal was confirmed
//     in time, and the lock's key may expire before one is: the holder
//     hears it before anyone else can take the key; also at once when
//     Context is called after that time (an obtain answered late);
//   - [ErrStopped]: the watchdog stopped, so nothing renews the lock any more;
//   - [ErrNotTracked]: no tracked lock has that key when Context is called
//     (the context is cancelled at once);
//   - parent's cause when parent ends first, and context.Canceled after
//     the returned cancel is called.
//
// key is a lock's key as the registry tracks it, on any watched client (for
// a lock over several keys, its first key). The context is cancelled when
// the watchdog gives the lock up, before OnLost is called, whatever OnLost
// does. Locks nobody asked a context for cost nothing. Call the returned
// cancel when the work is done, to release the context's resources. Context
// is safe for concurrent use.
func (w *Watchdog) Context(parent context.Context, key string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if w == nil {
		cancel(ErrNilWatchdog)
		return ctx, func() { cancel(context.Canceled) }
	}
	w.mu.Lock()
	stopping := w.stopping
	w.mu.Unlock()
	if stopping {
		cancel(ErrStopped)
		return ctx, func() { cancel(context.Canceled) }
	}
	var values []string
	for _, t := range w.set.Tables() {
		t.Lock()
		if e := t.GetLocked(key); e != nil {
			values = append(values, e.Value)
		}
		t.Unlock()
	}
	if len(values) == 0 {
		cancel(ErrNotTracked)
		return ctx, func() { cancel(context.Canceled) }
	}
	r := w.contexts.add(key, values, cancel)
	// After add: a tell that marks the lock after this look ends r
	// (tellUnconfirmed marks, then ends the contexts).
	next, _, cause := w.lookUnconfirmed(key, values, false)
	if cause != nil {
		w.contexts.remove(r)
		cancel(cause)
		return ctx, func() { cancel(context.Canceled) }
	}
	lc := &lockContext{Context: ctx, w: w, key: key, values: values, cancel: cancel, reg: r}
	lc.next.Store(math.MinInt64)
	// Made stopped, and set once stored: wake reads it.
	timer := time.AfterFunc(math.MaxInt64, lc.wake)
	lc.timer.Store(timer)
	lc.wakeAt(next)
	stop := context.AfterFunc(ctx, func() {
		timer.Stop()
		w.contexts.remove(r)
	})
	return lc, func() {
		stop()
		timer.Stop()
		w.contexts.remove(r)
		cancel(context.Canceled)
	}
}

// lockContext is the context Context returns. Its scheduler cancels it at
// the lock's tell time; a job that asks it whether it may still act (Err,
// or context.Cause, which asks Value) before its scheduler has run is
// answered from the clock: past the tell time with no renewal confirmed,
// the lock is told then and there (lookUnconfirmed), so that the answer
// comes before anyone else can take the key however late the host runs
// the scheduler (I15). A job that only waits on Done asks nothing: a timer
// of the context's own looks at the lock at its tell time as last seen
// (wake), on a goroutine of the runtime's, so that the scheduler's
// lateness (its pass held up, its thread not run) does not delay Done
// either. Contexts derived from it follow it once it is cancelled.
type lockContext struct {
	context.Context
	w      *Watchdog
	key    string
	values []string
	cancel context.CancelCauseFunc
	reg    *ctxReg // its registration in w.contexts
	// next is when a look at the lock is due (ns since the set's epoch):
	// its earliest tell time as last seen; MaxInt64 once cancelled.
	next atomic.Int64
	// timer runs wake at next, while the context is not cancelled.
	timer atomic.Pointer[time.Timer]
}

// wakeRetry is the least time the timer waits: a next time that has
// passed by the time it is set (the look read the clock first) has it
// look again a millisecond later, never spin.
const wakeRetry = time.Millisecond

// wake is the context's timer: it looks at the lock (as Err does, but its
// goroutine holds no table, so it waits for the tables rather than skip
// the look) and sets itself for the lock's next tell time, which a
// renewal confirmed since has moved. A lock renewed in time costs one
// wake per renewal that moved its tell time, each a look of its table.
func (c *lockContext) wake() {
	if c.Context.Err() != nil {
		c.next.Store(math.MaxInt64)
		return
	}
	next, h, cause := c.w.lookUnconfirmed(c.key, c.values, true)
	if cause != nil {
		c.told(cause, h)
		c.next.Store(math.MaxInt64)
		return
	}
	c.next.Store(next)
	c.wakeAt(next)
}

// wakeAt sets the timer for next (ns since the set's epoch), wakeRetry
// from now at the least; not for math.MaxInt64: a lock no longer tracked
// ends its contexts by how it ended.
func (c *lockContext) wakeAt(next int64) {
	if next != math.MaxInt64 {
		c.timer.Load().Reset(max(time.Duration(next-c.w.set.Now()), wakeRetry))
	}
}

func (c *lockContext) Err() error {
	c.look()
	return c.Context.Err()
}

func (c *lockContext) Value(key any) any {
	c.look()
	return c.Context.Value(key)
}

// look tells the lock's holders when its tell time has passed with no
// renewal confirmed (lookUnconfirmed); before that time it costs a clock
// read. A renewal confirmed since moves the time of the next look.
func (c *lockContext) look() {
	if c.w.set.Now() < c.next.Load() {
		return
	}
	if c.Context.Err() != nil {
		c.next.Store(math.MaxInt64)
		return
	}
	if !c.w.tablesFree() {
		// Asked with a table locked, by this goroutine maybe: a look
		// would wait for itself. table.Mark no longer asks a context
		// anything but Done with its table locked (it did, and a refresh
		// made with a job's context deadlocked); this guards any other
		// caller that does. The next ask looks again, and the scheduler
		// tells the lock in any case.
		return
	}
	next, h, cause := c.w.lookUnconfirmed(c.key, c.values, true)
	if cause != nil {
		c.told(cause, h)
		next = math.MaxInt64
	}
	c.next.Store(next)
}

// told cancels the context with cause, found by a look. When this look
// told the lock, its contexts are cancelled already. When another teller
// had marked the lock (h) and has not cancelled its contexts yet, it
// will, and counts its holders then, those told late apart (ToldLate,
// and the scheduler's late-tell log line): the context is handed over to
// it with how late it is cancelled, now, past the tell key
// (contexts.handOver), not forgotten (local CI run 209: the context's
// timer looked between the scheduler's mark and its cancelling, both
// late, and the late tell was neither counted nor logged). Late from
// now, not from when the look began: a look waits for the table lock,
// as long as the scheduler did (local run: a timer that began its look
// before the tell key and cancelled past it counted as on time).
func (c *lockContext) told(cause error, h handOff) {
	if h.value != "" {
		c.w.contexts.handOver(c.reg, lockID{c.key, h.value}, c.w.set.Now()-h.tellKey)
	}
	c.cancel(cause)
}

func (c *lockContext) String() string { return fmt.Sprintf("watchdog.Context(%q)", c.key) }

// contexts are the contexts Context handed out, by the lock (key and value)
// they follow.
type contexts struct {
	n       atomic.Int64 // registrations and handed over: none costs nothing on a loss
	mu      sync.Mutex   // guards byLock, handed and stopped
	stopped bool         // stopAll ran: later registrations end at once
	// byLock maps a lock's key and value to the contexts following it. A
	// lock held on several servers has one value on all of them.
	byLock map[lockID]map[*ctxReg]struct{}
	// handed counts, by lock, the contexts a look cancelled after another
	// teller had marked the lock told and before it ended them
	// (handOver): that teller's endTold counts them. It also keeps the
	// locks lost in between (endLost).
	handed map[lockID]handedOver
}

// handedOver is the contexts of a lock handed over to its teller: how
// many, and how late the latest was cancelled past the lock's tell key
// (ns; late when positive); lost: a loss cancelled the lock's contexts
// after the teller marked it and before it ended them (endLost), so
// that the tell tells nobody.
type handedOver struct {
	n    int
	by   int64
	lost bool
}

// count is what h adds to contexts.n.
func (h handedOver) count() int64 {
	if h.lost {
		return int64(h.n) + 1
	}
	return int64(h.n)
}

type lockID struct{ key, value string }

type ctxReg struct {
	ids    []lockID
	cancel context.CancelCauseFunc
}

func (c *contexts) add(key string, values []string, cancel context.CancelCauseFunc) *ctxReg {
	r := &ctxReg{cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		cancel(ErrStopped)
		return r
	}
	if c.byLock == nil {
		c.byLock = make(map[lockID]map[*ctxReg]struct{})
	}
	for _, v := range values {
		id := lockID{key, v}
		r.ids = append(r.ids, id)
		if c.byLock[id] == nil {
			c.byLock[id] = make(map[*ctxReg]struct{})
		}
		c.byLock[id][r] = struct{}{}
	}
	c.n.Add(1)
	return r
}

// remove forgets r; it may be called more than once.
func (c *contexts) remove(r *ctxReg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(r)
}

func (c *contexts) removeLocked(r *ctxReg) {
	if r.ids == nil {
		return
	}
	for _, id := range r.ids {
		if m := c.byLock[id]; m != nil {
			delete(m, r)
			if len(m) == 0 {
				delete(c.byLock, id)
			}
		}
	}
	r.ids = nil
	c.n.Add(-1)
}

// handOver forgets r, a registration whose context a look is about to
// cancel because the lock it follows (id) was marked told by another
// teller, which ends the lock's contexts next: that end counts r as one
// it cancelled. A registration gone already (that teller ended it, or
// its job cancelled it) is not counted again. A teller that marks a lock
// always ends its contexts after, and a context's looks start only once
// Context has found its lock not told, so a hand-over is always taken.
func (c *contexts) handOver(r *ctxReg, id lockID, by int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.ids == nil || c.stopped {
		return
	}
	c.removeLocked(r)
	if c.handed == nil {
		c.handed = make(map[lockID]handedOver)
	}
	h, ok := c.handed[id]
	if !ok || h.n == 0 || by > h.by {
		h.by = by
	}
	h.n++
	c.handed[id] = h
	c.n.Add(1)
}

// endLost cancels, with cause, the contexts following the lock key held
// with value, which is lost (or released); told: the lock was marked told
// when it was dropped. A teller that marks a lock ends its contexts
// after: a loss that finds some still following a marked lock comes
// before that end, and cancels them first. Their holders hear the loss,
// not the tell, which then tells them nothing: the teller's endTold
// learns so.
func (c *contexts) endLost(key, value string, cause error, told bool) {
	if c.n.Load() == 0 {
		return
	}
	id := lockID{key, value}
	c.mu.Lock()
	regs := c.takeLocked(id)
	if told && len(regs) > 0 && !c.stopped {
		if c.handed == nil {
			c.handed = make(map[lockID]handedOver)
		}
		if h := c.handed[id]; !h.lost {
			h.lost = true
			c.handed[id] = h
			c.n.Add(1)
		}
	}
	c.mu.Unlock()
	for _, r := range regs {
		r.cancel(cause)
	}
}

// endTold cancels the contexts following the lock, for the teller that
// marked it told, with the cause mkCause makes (only when a context
// follows the lock: the teller is the scheduler, and an allocation can
// draft it into the collector's work, see tellUnconfirmedOn), and returns
// how many; it also returns what was handed over to it (handOver,
// endLost).
func (c *contexts) endTold(key, value string, mkCause func() error) (ended int, handed handedOver) {
	if c.n.Load() == 0 {
		return 0, handed
	}
	id := lockID{key, value}
	c.mu.Lock()
	regs := c.takeLocked(id)
	if h, ok := c.handed[id]; ok {
		handed = h
		delete(c.handed, id)
		c.n.Add(-h.count())
	}
	c.mu.Unlock()
	if len(regs) > 0 {
		cause := mkCause()
		for _, r := range regs {
			r.cancel(cause)
		}
	}
	return len(regs), handed
}

// takeLocked forgets and returns the registrations following id; c.mu
// must be held.
func (c *contexts) takeLocked(id lockID) []*ctxReg {
	var regs []*ctxReg
	for r := range c.byLock[id] {
		regs = append(regs, r)
	}
	for _, r := range regs {
		c.removeLocked(r)
	}
	return regs
}

// stopAll cancels every context with cause, and any registered later.
func (c *contexts) stopAll(cause error) {
	c.mu.Lock()
	c.stopped = true
	var regs []*ctxReg
	for _, m := range c.byLock {
		for r := range m {
			regs = append(regs, r)
		}
	}
	for _, r := range regs {
		c.removeLocked(r)
	}
	for _, h := range c.handed {
		c.n.Add(-h.count())
	}
	c.handed = nil
	c.mu.Unlock()
	for _, r := range regs {
		r.cancel(cause)
	}
}

// ended follows the holder's commands that end a lock, for Context.
// Like a loss, a holder's command that ends a lock marked told cancels
// the contexts its teller has not ended yet: that tell tells them
// nothing (endLost).
func (w *Watchdog) ended(t *table.Table, e *table.Entry, how table.End, told bool) {
	switch how {
	case table.Released:
		w.contexts.endLost(e.Key, e.Value, ErrReleased, told)
	case table.NotHeld:
		w.contexts.endLost(e.Key, e.Value, ErrLost, told)
	}
}

// tablesFree reports whether every table of the watchdog's set could be
// locked just now: then the calling goroutine holds none of them, and a
// look that locks them cannot wait for itself. A table another goroutine
// holds at that moment makes it false too (the look waits for the next
// ask). sync.Mutex cannot tell the two apart.
func (w *Watchdog) tablesFree() bool {
	for _, t := range w.set.Tables() {
		if !t.TryLock() {
			return false
		}
		t.Unlock()
	}
	return true
}
