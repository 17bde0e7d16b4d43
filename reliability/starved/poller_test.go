package starved_test

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// pollPeriod is how often the poller reads the PTTL of every key.
	pollPeriod = 10 * time.Millisecond
	// valueEvery: every this many polls it reads every key's value too.
	valueEvery = 10
	// pollTimeout bounds one poll.
	pollTimeout = time.Second
)

// keyState is what the poller learnt about one key. Times are the
// poller's wall clock, which the holder process shares.
type keyState struct {
	// firstHeld: the receive time of the first poll that found the key.
	firstHeld time.Time
	// lastHeld: the send time of the last poll that found the key held
	// with its first value (and before it was seen gone): Redis surely
	// held it then, since it answered later.
	lastHeld time.Time
	// goneAt: the receive time of the first poll that found it gone
	// (PTTL -2) after it had been held: Redis surely had dropped it then.
	goneAt time.Time
	// minPTTL: the least PTTL seen while it was held.
	minPTTL time.Duration
	// value: the first value seen; lastValueOK the send time of the last
	// GET that found it; changedAt the receive time of the first GET that
	// found another one (nothing else writes these keys: it should never
	// be set).
	value       string
	lastValueOK time.Time
	changedAt   time.Time
	// backAt: the receive time of a poll that found the key again after
	// it was gone (nothing may re-create it: it should never be set).
	backAt time.Time
	// noTTL counts polls that found the key without an expiry.
	noTTL int
	// prevPTTL is the PTTL the last poll found while the key was held;
	// renewedAfter the send time of the poll before the last one that
	// found it higher: the last renewal Redis applied came after it.
	prevPTTL     time.Duration
	renewedAfter time.Time
	prevSent     time.Time
}

// stoppedAt returns when Redis was first seen no longer holding the key
// for its holder (gone, or with another value), or the zero time.
func (s *keyState) stoppedAt() time.Time {
	switch {
	case s.changedAt.IsZero():
		return s.goneAt
	case s.goneAt.IsZero() || s.changedAt.Before(s.goneAt):
		return s.changedAt
	default:
		return s.goneAt
	}
}

// poller reads every key's PTTL every pollPeriod through a client no
// lockwatch watches, in the test process (which nothing starves). It is
// used by one goroutine.
type poller struct {
	rdb    *redis.Client
	keys   []string
	state  []keyState
	polls  int
	failed int // polls, or commands of a poll, that got an error
	errs   []error
	sent   []time.Time // the send time of every poll
}

func newPoller(rdb *redis.Client, keys []string) *poller {
	return &poller{rdb: rdb, keys: keys, state: make([]keyState, len(keys))}
}

// run polls until done is closed (then it polls once more) or ctx ends.
func (p *poller) run(ctx context.Context, done <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	next := time.Now()
	for {
		select {
		case <-done:
			p.pollOnce(ctx)
			return
		case <-ctx.Done():
			return
		default:
		}
		p.pollOnce(ctx)
		next = next.Add(pollPeriod)
		d := time.Until(next)
		if d <= 0 {
			next = time.Now()
			continue
		}
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-done:
			if !timer.Stop() {
				<-timer.C
			}
		case <-ctx.Done():
			return
		}
	}
}

func (p *poller) pollOnce(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, pollTimeout)
	defer cancel()
	withValues := p.polls%valueEvery == 0
	p.polls++
	pipe := p.rdb.Pipeline()
	pttls := make([]*redis.Cmd, len(p.keys))
	for i, k := range p.keys {
		pttls[i] = pipe.Do(ctx, "PTTL", k)
	}
	var gets []*redis.Cmd
	if withValues {
		gets = make([]*redis.Cmd, len(p.keys))
		for i, k := range p.keys {
			gets[i] = pipe.Do(ctx, "GET", k)
		}
	}
	sent := time.Now()
	p.sent = append(p.sent, sent)
	_, _ = pipe.Exec(ctx) // each command's error is looked at below (GET of a missing key answers redis.Nil)
	recv := time.Now()
	bad := false
	// The GETs were sent after the PTTLs: a value found changed by this
	// poll makes its PTTL no evidence of the holder's lock.
	for i, c := range gets {
		v, err := c.Text()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			bad = p.note(err)
			continue
		}
		s := &p.state[i]
		switch {
		case s.value == "":
			s.value, s.lastValueOK = v, sent
		case v == s.value:
			s.lastValueOK = sent
		case s.changedAt.IsZero():
			s.changedAt = recv
			if s.lastHeld.After(s.lastValueOK) {
				s.lastHeld = s.lastValueOK
			}
		}
	}
	for i, c := range pttls {
		ms, err := c.Int64()
		if err != nil {
			bad = p.note(err)
			continue
		}
		s := &p.state[i]
		held := ms >= 0 || ms == -1
		switch {
		case held && s.goneAt.IsZero() && s.changedAt.IsZero():
			pttl := time.Duration(ms) * time.Millisecond
			if s.firstHeld.IsZero() {
				s.firstHeld, s.minPTTL = recv, pttl
			}
			if ms == -1 {
				s.noTTL++
			} else {
				s.minPTTL = min(s.minPTTL, pttl)
				// A PTTL only counts down: a higher one means a PEXPIRE.
				if !s.prevSent.IsZero() && pttl > s.prevPTTL {
					s.renewedAfter = s.prevSent
				}
				s.prevPTTL, s.prevSent = pttl, sent
			}
			s.lastHeld = sent
		case held && !s.goneAt.IsZero() && s.backAt.IsZero():
			s.backAt = recv
		case !held && !s.firstHeld.IsZero() && s.goneAt.IsZero():
			s.goneAt = recv
		}
	}
	if bad {
		p.failed++
	}
}

// note keeps the first few errors and returns true.
func (p *poller) note(err error) bool {
	if len(p.errs) < 3 {
		p.errs = append(p.errs, err)
	}
	return true
}

// gaps returns the longest time between two polls sent in [from, to], and
// the 99th percentile.
func (p *poller) gaps(from, to time.Time) (longest, p99 time.Duration) {
	var ds []time.Duration
	for i := 1; i < len(p.sent); i++ {
		if p.sent[i-1].Before(from) || p.sent[i].After(to) {
			continue
		}
		ds = append(ds, p.sent[i].Sub(p.sent[i-1]))
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)-1], ds[len(ds)*99/100]
}
