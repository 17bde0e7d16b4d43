package table

import (
	"context"
	"time"
)

// Mark tells t that a holder's command about the lock key held with value
// (a refresh, a release, or an obtain again with the same value) is about
// to be sent. Only the owner's own command marks its lock: a command that
// carries another value (another goroutine's obtain attempt) marks nothing
// and delays nothing. If a renewal of the entry is in flight, Mark waits
// until it ends or ctx is done, whichever comes first, so that the
// holder's command reaches Redis after it; until [Table.Unmark], the
// watchdog neither renews the entry nor reports it lost (the holder's
// command decides its fate). Mark returns the marked entry, or nil when
// key is not tracked with value.
//
// A renewal the watchdog stopped waiting for (a late one) is waited for only by
// a refresh to a shorter TTL (ttl, when not 0): landing after it, it would
// undo the shortening (the renew script never shortens a TTL); a release
// or a longer refresh it cannot harm, and a holder waiting holds up the
// lock's renewals.
//
// A refresh (ttl not 0) is kept apart ([Table.RefreshingLocked]): it may
// hang past the lock's expiry, and its holder must still be told in time,
// where a release on its way needs no tell.
func (t *Table) Mark(ctx context.Context, key, value string, ttl time.Duration) Marked {
	t.mu.Lock()
	e := t.locks[key]
	if e == nil || t.removed || e.Value != value {
		t.mu.Unlock()
		return Marked{}
	}
	if e.flags&busyMask != busyMask { // 3 at most: then the last Unmark ends the mark early
		e.flags += busyOne
	}
	m := Marked{e: e, refresh: ttl > 0}
	if m.refresh {
		if t.refreshing == nil {
			t.refreshing = make(map[*Entry]int32)
		}
		t.refreshing[e]++
	}
	shorter := ttl > 0 && ttl < e.TTL
	mustWait := func() bool { return e.flags&InFlight != 0 || shorter && t.LateLocked(e) }
	if !mustWait() {
		t.mu.Unlock()
		return m
	}
	// The holder's context is asked nothing but its Done channel with the
	// table locked: its Err and Value are the holder's code (a
	// watchdog.Context looks at the table when asked, and would wait for
	// the lock this goroutine holds). context.AfterFunc asks Value and
	// Err, and so does its stop: both run with the table let go, and what
	// changed meanwhile is judged again once the table is locked.
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	var stop func() bool
	if done != nil {
		t.mu.Unlock()
		stop = context.AfterFunc(ctx, func() {
			t.mu.Lock()
			t.cond.Broadcast()
			t.mu.Unlock()
		})
		t.mu.Lock()
	}
	for mustWait() && !t.removed && !closed(done) {
		t.waiting++
		t.cond.Wait()
		t.waiting--
	}
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
	return m
}

// closed reports whether done, a context's Done channel, is closed; a nil
// channel never is.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Marked is a holder's command marked by [Table.Mark], to be ended by
// [Table.Unmark]; the zero Marked marks nothing.
type Marked struct {
	e       *Entry
	refresh bool
}

// Entry returns the entry marked, nil for none.
func (m Marked) Entry() *Entry { return m.e }

// Unmark ends a mark set by [Table.Mark]; m may mark nothing.
func (t *Table) Unmark(m Marked) {
	e := m.e
	if e == nil {
		return
	}
	t.mu.Lock()
	if e.Busy() {
		e.flags -= busyOne
	}
	if m.refresh {
		if n := t.refreshing[e] - 1; n > 0 {
			t.refreshing[e] = n
		} else {
			delete(t.refreshing, e)
		}
	}
	// A copy of a lock lost as a whole, left while its holder's command
	// was on its way, goes now.
	drop := !e.Busy() && e.flags&Detached == 0 && t.set.doomed(e)
	if drop {
		t.detach(e)
		t.delete(e)
	}
	t.mu.Unlock()
	if drop {
		t.set.unlink(e)
	}
}

// RefreshingLocked reports whether a refresh of e by its holder is on its
// way to Redis (marked by [Table.Mark]); the table must be locked.
func (t *Table) RefreshingLocked(e *Entry) bool {
	if len(t.refreshing) == 0 {
		return false
	}
	return t.refreshing[e] > 0
}

// Op is what a holder's command did, as the registry's adapters tell it.
type Op uint8

const (
	OpObtain  Op = iota + 1 // the holder now holds the lock
	OpRefresh               // the holder extended it
	OpNotHeld               // the holder learnt it does not hold it
	OpRelease               // the holder released it, or tried to
	OpAttempt               // the holder tried to obtain it and did not get it
)

// Change is one classified holder command.
type Change struct {
	Op     Op
	Key    string
	Keys   []string // every key of a lock over several keys; nil for one key
	Value  string
	TTL    time.Duration
	Source uint8
	// Snapshot, when not nil, receives a snapshot of the entry the change
	// concerned, taken under the table lock as the change was made (so
	// that an entry released keeps its keys in it).
	Snapshot *Info
	// Sent is when the command was sent, in ns since the set's epoch (0:
	// now). An obtain or refresh is confirmed as of then: Redis set the
	// TTL after it, so the lock cannot expire before Sent plus the TTL.
	Sent int64

	digest   string // the value's SHA1 when it is longer than DigestAbove
	answered int64  // when ApplyNow saw the answer to a command sent at Sent (0: not known)
}

// Apply records a holder's command and returns the entry it concerned (nil
// when it changed nothing) and whether the entry is still tracked. The
// observer hears of it: ChangedLocked with the table locked, the rest
// after the table lock is let go.
func (t *Table) Apply(c Change, now time.Time) (e *Entry, tracked bool) {
	if c.Op == OpAttempt {
		return t.attempt(&c)
	}
	return t.apply(&c, t.set.Since(now))
}

// ApplyNow is Apply at the present moment, read from the monotonic clock
// only when the change needs it. It takes c by pointer: it runs in the
// registry's hook, on the goroutine that sent the command, whose stack may
// be small.
func (t *Table) ApplyNow(c *Change) (e *Entry, tracked bool) {
	if c.Op == OpAttempt {
		return t.attempt(c)
	}
	if c.Sent != 0 {
		if c.Op == OpObtain || c.Op == OpRefresh { // only they confirm a TTL
			c.answered = t.set.Now()
		}
		return t.apply(c, c.Sent)
	}
	return t.apply(c, t.set.Now())
}

// attempt records an obtain that did not get the lock: only a lock over
// several servers cares (how many servers its holder tried).
func (t *Table) attempt(c *Change) (e *Entry, tracked bool) {
	t.set.link(t, nil, c.Key, c.Value)
	return nil, false
}

// apply records a change other than an attempt, made at ns.
func (t *Table) apply(c *Change, ns int64) (e *Entry, tracked bool) {
	if c.Op == OpObtain && len(c.Value) > DigestAbove {
		c.digest = Digest(c.Value) // before the lock: it reads the whole value
	}
	t.mu.Lock()
	if t.removed {
		t.mu.Unlock()
		return nil, false
	}
	old := t.locks[c.Key]
	if old != nil || c.Op != OpObtain || len(c.Keys) > 1 || c.Snapshot != nil {
		return t.applyLocked(c, ns, old)
	}
	// A lock over one key that is not tracked yet, the hook's most common
	// change, in short (applyLocked does the same, at more length).
	e = t.newEntry()
	e.Key, e.Value, e.TTL, e.srcGen = c.Key, c.Value, c.TTL, c.Source&0x0F
	e.Obtained, e.Confirmed = ns, ns
	t.insert(e, c.Keys, c.digest)
	t.answeredLateLocked(e, c, ns)
	o := t.set.observer()
	later := o != nil && o.ChangedLocked(t, e)
	t.mu.Unlock()
	if t.set.watched() > 1 {
		t.set.link(t, e, c.Key, c.Value)
		if o != nil {
			t.set.contend(t, c.Key, c.Value, o)
		}
	}
	if later {
		o.Changed(t, e)
	}
	return e, true
}

// applyLocked is apply with t locked (it unlocks it) and old the entry
// tracked under c.Key, if any.
func (t *Table) applyLocked(c *Change, ns int64, old *Entry) (e *Entry, tracked bool) {
	var ch changed
	doomed := old != nil && old.Value == c.Value && (c.Op == OpObtain || c.Op == OpRefresh) && t.set.doomed(old)
	switch {
	case doomed:
		// A copy of a lock lost as a whole: the holder's refresh or obtain
		// of it keeps nothing tracked.
		ch.told = t.ToldLocked(old)
		t.detach(old)
		t.delete(old)
		ch.ended, ch.how = old, NotHeld
	case c.Op == OpObtain:
		t.obtainLocked(c, ns, old, &ch)
	case c.Op == OpRefresh:
		if old != nil && old.Value == c.Value {
			old.TTL, old.Confirmed = c.TTL, ns
			t.confirmedLocked(old)
			t.answeredLateLocked(old, c, ns)
			ch.e, ch.tracked = old, true
		}
	case c.Op == OpNotHeld || c.Op == OpRelease:
		if old != nil && old.Value == c.Value {
			if c.Snapshot != nil {
				*c.Snapshot = t.InfoLocked(old)
			}
			ch.told = t.ToldLocked(old)
			t.detach(old)
			t.delete(old)
			ch.e = old
			ch.ended, ch.how = old, Released
			if c.Op == OpNotHeld {
				ch.how = NotHeld
			}
		}
	}
	if c.Snapshot != nil && ch.e != nil && ch.ended != ch.e {
		*c.Snapshot = t.InfoLocked(ch.e)
	}
	o := t.set.observer()
	if ch.tracked && o != nil {
		ch.later = o.ChangedLocked(t, ch.e)
	}
	t.mu.Unlock()
	t.tell(o, c, &ch)
	return ch.e, ch.tracked
}

// changed is what applyLocked did, for tell.
type changed struct {
	e       *Entry // the entry the change concerned
	tracked bool   // e is tracked after it
	fresh   bool   // e was made now
	later   bool   // the observer asked for Changed
	ended   *Entry // an entry the holder ended
	how     End
	told    bool   // ended was marked told
	taken   *Entry // an entry whose key another value took
	info    Info   // taken's snapshot
	swapped *Entry // an entry the same owner obtained again over other keys
}

// obtainLocked records an obtain of c.Key, tracked as old (or nil); the
// table is locked.
func (t *Table) obtainLocked(c *Change, ns int64, old *Entry, ch *changed) {
	ch.tracked = true
	if old != nil && old.Value == c.Value && sameKeys(t.multi[old], c.Keys) {
		old.TTL, old.Confirmed = c.TTL, ns
		t.confirmedLocked(old)
		t.answeredLateLocked(old, c, ns)
		ch.e = old
		return
	}
	e := t.newEntry()
	*e = Entry{Key: c.Key, Value: c.Value, TTL: c.TTL, Obtained: ns, Confirmed: ns, srcGen: c.Source & 0x0F}
	if old != nil {
		if old.Value != c.Value {
			// Another owner has the key now: the old owner lost it, and
			// hears so before the new lock is tracked.
			ch.taken, ch.info = old, t.InfoLocked(old)
		} else {
			// The same value over other keys is the same owner: its entry
			// is made anew, its contexts and reports stay.
			ch.swapped = old
		}
		t.detach(old)
		t.forget(old)
	}
	t.insert(e, c.Keys, c.digest)
	t.answeredLateLocked(e, c, ns)
	ch.e, ch.fresh = e, true
}

// answeredLateLocked notes, for e just obtained or refreshed by c (sent at
// ns), that its answer came late (after a third of its TTL: the server
// stalled, or the network): Redis set the TTL at some instant between the
// send and the answer, so the key may live until the answer plus the TTL
// ([Table.MayLiveUntilLocked]), and the lock is not given up as
// unreachable before then. Its confirmation stays the send time, so that
// its holder is told early, never late. The table is locked.
func (t *Table) answeredLateLocked(e *Entry, c *Change, ns int64) {
	if c.answered-ns > int64(e.TTL)/3 {
		t.mayLiveUntilLocked(e, ns, c.answered+int64(e.TTL))
	}
}

// tell, with t unlocked, updates the groups of locks over several servers
// and tells the observer o (nil: none) what applyLocked changed.
func (t *Table) tell(o Observer, c *Change, ch *changed) {
	if ch.taken != nil && o != nil {
		o.Taken(t, ch.taken, ch.info)
	} else if ch.taken != nil {
		t.set.unlink(ch.taken)
	}
	if ch.swapped != nil {
		t.set.unlink(ch.swapped)
	}
	ended := ch.ended
	if ended != nil {
		// A copy of a lock over several servers that its holder's refresh
		// found not held is one copy lost: whether the lock is, the
		// observer (the watchdog) decides from the group.
		if g := t.set.GroupOf(ended); g != nil && ch.how == NotHeld && o != nil {
			o.CopyNotHeld(t, ended, g, ch.told)
			ended = nil
		} else {
			t.set.unlink(ended)
		}
	}
	if ch.fresh && t.set.watched() > 1 {
		t.set.link(t, ch.e, c.Key, c.Value)
		if o != nil {
			t.set.contend(t, c.Key, c.Value, o)
		}
	}
	if o != nil {
		if ended != nil {
			o.Ended(t, ended, ch.how, ch.told)
		}
		if ch.later {
			o.Changed(t, ch.e)
		}
	}
}

func sameKeys(have, keys []string) bool {
	if len(keys) <= 1 && have == nil {
		return true
	}
	if len(have) != len(keys) {
		return false
	}
	for i := range keys {
		if keys[i] != have[i] {
			return false
		}
	}
	return true
}
