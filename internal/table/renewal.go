package table

// Hold keeps in es the entries that may be renewed now (still tracked, no
// holder command on its way, no renewal in flight), marks them in flight
// and returns them, in es's array. Every held entry must be passed to
// [Table.Settle] once.
func (t *Table) Hold(es []*Entry) []*Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.HoldLocked(es)
}

// HoldLocked is Hold with the table locked.
func (t *Table) HoldLocked(es []*Entry) []*Entry {
	out := es[:0]
	for _, e := range es {
		if e.flags&(Detached|InFlight|busyMask) == 0 {
			e.flags |= InFlight
			out = append(out, e)
		}
	}
	return out
}

// Renewal results, as Settle takes them.
const (
	Renewed int8 = 1  // Redis extended the lock
	Gone    int8 = 0  // a key of the lock does not exist
	Taken   int8 = -1 // a key holds another value
	Failed  int8 = 2  // no answer, or an error
)

// Settle ends the renewal of es (held by [Table.Hold]); res[i] is what
// happened to es[i], sent the time the renewal was sent. Renewed entries are
// confirmed at sent, and retried no more. Entries found gone or taken are dropped, unless a
// holder's command about them is on its way (it decides). fn, when not
// nil, is called with the table locked for every entry that was still
// tracked, with its index in es, its result and, when Settle dropped it, a
// snapshot of it taken before. Settle wakes holders waiting in [Table.Mark].
func (t *Table) Settle(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, e := range es {
		e.flags &^= InFlight
		r := res[i]
		if e.flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
				t.confirmedLocked(e)
			}
			e.Renewals++
			e.flags &^= Retry
		case Gone, Taken:
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// SettleLate applies the answer of a renewal the watchdog stopped waiting
// for (its entries were let go by [Table.ReleaseLocked] and may be in flight
// again, in a later renewal): an answer is the truth about Redis whenever
// it comes. A renewed entry is confirmed as of sent, when that is later
// than its last confirmation. An entry found gone or taken is dropped only
// when nothing confirmed it after sent (a renewal in flight since does
// not count: it cannot bring the key back). fn is as for [Table.Settle].
func (t *Table) SettleLate(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLateLocked(es)
	for i, e := range es {
		r := res[i]
		if e.flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
				e.Renewals++
				e.flags &^= Retry
				t.confirmedLocked(e)
			}
		case Gone, Taken:
			// What Redis said is final unless something confirmed the lock
			// since (a holder's obtain or refresh): a renewal never brings
			// a key back, so a later renewal in flight cannot undo it.
			if e.Confirmed > sent {
				continue
			}
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		default:
			continue
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
}

// ReleaseLocked ends in-flight marks without a result: the watchdog
// stopped waiting for the renewal (it hedged it), which is late until it
// ends (its answer goes to [Table.SettleLate], its end without one to
// [Table.EndLate]). The table must be locked.
//
// A late renewal may still reach Redis: while one is on its way the
// entry is not given up (LateLocked), and the holder's refresh to a
// shorter TTL waits for it ([Table.Mark]), so that it is never overtaken
// by it. One sent at sent while its key was still held as far as the
// watchdog knew may have renewed it then, its answer waiting unread: the
// key may live until sent plus its TTL ([Table.MayLiveUntilLocked]). The
// watchdog passes math.MaxInt64 for sent when it does not count on that.
// ReleaseLocked returns marked (its length reset) with, for each of es,
// whether that was noted, for [Table.WithdrawLate].
func (t *Table) ReleaseLocked(es []*Entry, sent int64, marked []bool) []bool {
	marked = marked[:0]
	for _, e := range es {
		e.flags &^= InFlight
		mark := false
		if e.flags&Detached == 0 {
			if t.late == nil {
				t.late = make(map[*Entry]int32)
			}
			t.late[e]++
			if sent < e.Confirmed+int64(e.TTL) {
				t.mayLiveUntilLocked(e, sent, sent+int64(e.TTL))
				mark = true
			}
		}
		marked = append(marked, mark)
	}
	if t.waiting > 0 {
		t.cond.Broadcast() // a release or a longer refresh need not wait
	}
	return marked
}

// WithdrawLate takes back what ReleaseLocked noted for the entries of es
// marked, of a late renewal sent at sent that ended without reaching
// Redis as far as the watchdog can tell (its connection refused, reset
// or dropped): their keys may no longer live past their TTL because of
// it. A time noted by several late renewals stays until each of them
// withdrew it (or a confirmation outlives it).
func (t *Table) WithdrawLate(es []*Entry, marked []bool, sent int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, e := range es {
		if i >= len(marked) || !marked[i] || e.flags&Detached != 0 {
			continue
		}
		m, ok := t.lateUntil[e]
		if !ok || sent < m.first {
			continue // noted anew since, by later renewals
		}
		if m.marks--; m.marks <= 0 {
			delete(t.lateUntil, e)
		} else {
			t.lateUntil[e] = m
		}
	}
}

// Release is ReleaseLocked with the table not locked.
func (t *Table) Release(es []*Entry, sent int64) {
	t.mu.Lock()
	t.ReleaseLocked(es, sent, nil)
	t.mu.Unlock()
}

// LateLocked reports whether a renewal of e that the watchdog stopped
// waiting for has not ended yet; the table must be locked.
func (t *Table) LateLocked(e *Entry) bool { return len(t.late) > 0 && t.late[e] > 0 }

// MayLiveUntilLocked returns when e's key may expire at the latest, as
// far as the watchdog can know, with no renewal of it waited for: its
// last confirmation plus its TTL or, when later, the send time of a late
// renewal sent before then, answered or not, plus its TTL (Redis may have
// applied it as it came; a renewal sent after the key may have expired
// extends nothing the watchdog can count on). The table must be locked.
func (t *Table) MayLiveUntilLocked(e *Entry) int64 {
	at := e.Confirmed + int64(e.TTL)
	if len(t.lateUntil) > 0 {
		if m, ok := t.lateUntil[e]; ok {
			if m.until <= at {
				delete(t.lateUntil, e) // a confirmation since outlives it
			} else {
				at = m.until
			}
		}
	}
	return at
}

// mayLiveUntilLocked notes that e's key may live until until, because of
// a command sent at sent, unless it was known to live longer
// ([Table.MayLiveUntilLocked] reads it). The table must be locked.
func (t *Table) mayLiveUntilLocked(e *Entry, sent, until int64) {
	if t.lateUntil == nil {
		t.lateUntil = make(map[*Entry]lateMark)
	}
	m, ok := t.lateUntil[e]
	if !ok {
		m.first = sent
	}
	m.until = max(m.until, until)
	m.first = min(m.first, sent)
	m.marks++
	t.lateUntil[e] = m
}

// lateMark is how long late commands may have kept an entry's key.
type lateMark struct {
	until int64 // the latest they may have kept it to
	first int64 // the first one's send time
	marks int32 // how many noted it, and have not withdrawn it
}

// EndLate ends the late renewal of es: it ended without an answer to
// apply.
func (t *Table) EndLate(es []*Entry) {
	t.mu.Lock()
	t.endLateLocked(es)
	t.mu.Unlock()
}

func (t *Table) endLateLocked(es []*Entry) {
	for _, e := range es {
		if n, ok := t.late[e]; ok {
			if n <= 1 {
				delete(t.late, e)
			} else {
				t.late[e] = n - 1
			}
		}
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// TellLocked records that e's holder is told its lock may be lost: no
// renewal was confirmed in time. It reports false when it was told so
// already since Redis last confirmed e. The table must be locked.
func (t *Table) TellLocked(e *Entry) bool {
	if e.flags&Detached != 0 {
		return false
	}
	if _, ok := t.told[e]; ok {
		return false
	}
	if t.told == nil {
		t.told = make(map[*Entry]int64)
	}
	t.told[e] = e.Confirmed // any value but groupTold
	return true
}

// groupTold marks, in a table's told, a copy told as part of its whole
// lock over several servers (TellGroupLocked).
const groupTold = -1

// TellGroupLocked records that e, a copy of a lock over several servers,
// was told as part of the whole lock (its quorum no longer confirmed in
// time), as TellLocked does, and reports whether it had been told so
// already since Redis last confirmed it. The table must be locked.
func (t *Table) TellGroupLocked(e *Entry) (already bool) {
	if e.flags&Detached != 0 {
		return false
	}
	if t.told == nil {
		t.told = make(map[*Entry]int64)
	}
	v, ok := t.told[e]
	t.told[e] = groupTold
	return ok && v == groupTold
}

// ToldLocked reports whether e's holder was told its lock may be lost
// since Redis last confirmed it; the table must be locked.
func (t *Table) ToldLocked(e *Entry) bool {
	if len(t.told) == 0 {
		return false
	}
	_, ok := t.told[e]
	return ok
}

// confirmedLocked forgets that e's holder was told its lock may be lost:
// Redis confirmed it since.
func (t *Table) confirmedLocked(e *Entry) {
	if len(t.told) > 0 {
		delete(t.told, e)
	}
}

// Drop untracks e unless it is already untracked or a holder's command
// about it is on its way, and returns a snapshot of it taken before (its
// keys included) and whether it did. Called with the table locked.
func (t *Table) Drop(e *Entry) (Info, bool) {
	if e.flags&Detached != 0 || e.Busy() {
		return Info{}, false
	}
	i := t.InfoLocked(e)
	t.detach(e)
	t.delete(e)
	return i, true
}

// DropAll untracks every entry and returns them with snapshots of them.
func (t *Table) DropAll() ([]*Entry, []Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	es := make([]*Entry, 0, len(t.locks))
	out := make([]Info, 0, len(t.locks))
	for _, e := range t.locks {
		es = append(es, e)
		out = append(out, t.InfoLocked(e))
		t.detach(e)
	}
	t.locks = make(map[string]*Entry)
	t.multi = nil
	t.verdicts = nil
	t.told, t.digests, t.lateUntil = nil, nil, nil
	t.peak = 0
	if t.slots != nil {
		clear(t.slots)
	}
	t.keepLocked()
	return es, out
}

// ForgetLanes takes every entry out of the watchdog's lanes (Queued,
// Retry, Fresh): a watchdog that stops leaves nothing listed for the next.
func (t *Table) ForgetLanes() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.locks {
		e.flags &^= Queued | Ready | Retry | Fresh
	}
}

// EndAllLate forgets every late renewal: the watchdog stopped, and
// renewals that have not ended by then no longer hold up the holders'
// refreshes.
func (t *Table) EndAllLate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.late = nil
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}
