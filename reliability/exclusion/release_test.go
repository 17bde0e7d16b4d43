package exclusion_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Scenario 2 of the reliability suite.
const (
	rrCycles   = 10000
	rrWorkers  = 8
	rrTTL      = 5 * time.Second // long: a renewal pipeline is never given up (timeout TTL/4)
	rrMaxHold  = 3 * time.Millisecond
	rrSchedule = "@every 10ms"
	rrEvery    = 10 * time.Millisecond
)

// The release scripts of the linked upstreams, as SHA1 of their sources
// (redislock v0.9.4 luaRelease; redsync v4.12.1 to v4.18.1 deleteScript).
// The adapters pin the same values; the test checks that every release it
// made shows up under one of them.
const (
	redislockReleaseSHA1 = "cf0e94b2e9ffc7e04395cf88f7583fc309985910"
	redsyncDeleteSHA1    = "e950836ed1e694540c503ef9972b8de518044d3b"
)

// releasedMarker starts the ECHO a worker sends after a release returned:
// "released <key> <value>". In the MONITOR stream everything after it was
// sent after the release returned.
const releasedMarker = "released"

type lockID struct{ key, value string }

type lostLock struct {
	id  lockID
	err error
}

// rrObtain obtains key with redislock or redsync and returns the value and
// the release.
func rrObtain(ctx context.Context, rdb *redis.Client, rs *redsync.Redsync, useRedsync bool, key string) (string, func(context.Context) error, error) {
	if !useRedsync {
		l, err := redislock.Obtain(ctx, rdb, key, rrTTL, nil)
		if err != nil {
			return "", nil, err
		}
		return l.Token() + l.Metadata(), l.Release, nil
	}
	m := rs.NewMutex(key, redsync.WithExpiry(rrTTL), redsync.WithTries(3))
	if err := m.LockContext(ctx); err != nil {
		return "", nil, err
	}
	return m.Value(), func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock answered false")
		}
		return err
	}, nil
}

// TestReleaseRacingSweep obtains and releases 10,000 locks (both libraries,
// eight goroutines, holds of 0-3 ms) while the watchdog sweeps every 10 ms,
// and reads every command the server executed through MONITOR. It checks
// that no renewal naming a (key, value) reaches Redis after the release of
// that lock returned (I3), that no renewal extends a lock after its release
// script ran, that the renew script runs nothing but MGET, EXISTS and
// PEXPIRE of its own keys, that
// nothing is reported lost and that no lock key is left. Sweeps must really
// race the releases: some renewals must extend locks that were released
// later.
func TestReleaseRacingSweep(t *testing.T) {
	// The watchdog parses "@every" itself and ticks every 10 ms; the test
	// also calls Sweep every 10 ms, so that sweeps start at other moments
	// than ticks.
	t.Logf("schedule %q; Sweep is called every %v as well", rrSchedule, rrEvery)

	srv := testredis.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spy := redis.NewClient(&redis.Options{Addr: srv.Addr}) // never watched
	defer spy.Close()
	mon := startMonitor(t, srv.Addr)
	// Where does this server log a script's own commands: before or after
	// the script call? Find out with a marker.
	calib := "calibrate-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := spy.Eval(ctx, "return redis.call('ECHO', ARGV[1])", nil, calib).Err(); err != nil {
		t.Fatalf("calibration EVAL: %v", err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4 * rrWorkers})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var (
		lostMu sync.Mutex // guards lost
		lost   []lostLock
	)
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule(rrSchedule), watchdog.WithOnLost(func(l registry.Lock, err error) {
		lostMu.Lock()
		defer lostMu.Unlock()
		lost = append(lost, lostLock{lockID{l.Key, l.Value}, err})
	}))
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer wd.Stop()

	// The sweeper: a sweep every 10 ms.
	var sweepCalls, sweepErrs atomic.Int64
	stopSweeps := make(chan struct{})
	sweeperDone := make(chan struct{})
	go func() {
		defer close(sweeperDone)
		tk := time.NewTicker(rrEvery)
		defer tk.Stop()
		for {
			select {
			case <-stopSweeps:
				return
			case <-tk.C:
			}
			sweepCalls.Add(1)
			if err := wd.Sweep(ctx); err != nil {
				sweepErrs.Add(1)
			}
		}
	}()

	started := time.Now()
	rs := redsync.New(goredis.NewPool(rdb))
	held := make([][]lockID, rrWorkers)
	errs := make([][]string, rrWorkers)
	var wg sync.WaitGroup
	for g := 0; g < rrWorkers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < rrCycles; i += rrWorkers {
				key := fmt.Sprintf("rr:%d:%d", g, i%4)
				value, release, err := rrObtain(ctx, rdb, rs, i%2 == 1, key)
				if err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: obtain %s: %v", i, key, err))
					continue
				}
				if hold := rand.N(rrMaxHold + 1); hold > 0 {
					time.Sleep(hold)
				}
				if err := release(ctx); err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: release %s: %v", i, key, err))
				}
				if err := rdb.Echo(ctx, releasedMarker+" "+key+" "+value).Err(); err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: ECHO: %v", i, err))
				}
				held[g] = append(held[g], lockID{key, value})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started)
	close(stopSweeps)
	<-sweeperDone
	wd.Stop()
	st := wd.Stats()
	raw, err := mon.stop(ctx, spy)
	if err != nil {
		t.Fatalf("MONITOR: %v", err)
	}
	for _, es := range errs {
		for _, e := range es {
			t.Errorf("%s", e)
		}
	}

	lines := make([]monLine, 0, len(raw))
	for _, s := range raw {
		l, err := parseMonitorLine(s)
		if err != nil {
			t.Fatalf("%v", err)
		}
		lines = append(lines, l)
	}
	luaFirst, err := calibrate(lines, calib)
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmds, ran := groupScripts(lines, luaFirst)
	an := analyseRenewals(cmds, ran)

	cycles := 0
	for _, h := range held {
		for _, id := range h {
			cycles++
			if _, ok := an.released[id]; !ok {
				t.Errorf("no release script call for %s %s in the MONITOR stream (release SHA1s not %s / %s?)", id.key, id.value, redislockReleaseSHA1, redsyncDeleteSHA1)
			}
			if _, ok := an.returned[id]; !ok {
				t.Errorf("no %q marker for %s %s in the MONITOR stream", releasedMarker, id.key, id.value)
			}
		}
	}
	var keys []string
	if keys, err = spy.Keys(ctx, "*").Result(); err != nil {
		t.Fatalf("KEYS *: %v", err)
	}
	lostMu.Lock()
	defer lostMu.Unlock()

	t.Logf("%d cycles in %v; %d Sweep calls (%d returned an error), %d sweeps in Stats; MONITOR: %d commands, %d renew script calls naming %d locks, %d renewals (PEXPIRE) of %d distinct locks, %d of which were released later",
		cycles, elapsed.Round(time.Millisecond), sweepCalls.Load(), sweepErrs.Load(), st.Sweeps, len(lines), an.renewCalls, an.named, an.extended, len(an.renewedLocks), an.renewedThenReleased())
	t.Logf("renewals naming a lock after its release script ran but before its release returned (allowed: the script found the key gone): %d; after the release returned: %d; extending a lock after its release script ran: %d",
		an.inWindow, len(an.afterReturn), len(an.extendedAfterRelease))
	t.Logf("Stats: renewals %d, lost %d, failed renew calls %d; OnLost %d; keys left %d", st.Renewals, st.Lost, st.Failures, len(lost), len(keys))

	if cycles != rrCycles {
		t.Errorf("cycles completed: got %d, want %d", cycles, rrCycles)
	}
	for i, v := range an.afterReturn {
		if i == 10 {
			t.Errorf("... %d renewals after release in all", len(an.afterReturn))
			break
		}
		t.Errorf("renewal after the release returned: %s", v)
	}
	for _, v := range an.extendedAfterRelease {
		t.Errorf("renewal extended a lock after its release script ran: %s", v)
	}
	for _, v := range an.badScriptCmds {
		t.Errorf("the renew script ran %s, want only MGET, EXISTS and PEXPIRE of its keys", v)
	}
	// Every lock was held until its holder released it, so every OnLost is
	// a false report, including those whose renewal ran between the
	// release script and the release's return (the hook marks a release
	// before sending it, so the watchdog leaves such a lock to it).
	inWindow := 0
	for _, l := range lost {
		if an.renewedInWindow(l.id) {
			inWindow++
		}
		t.Errorf("OnLost(%s %s, %v), want no report: the holder released it (%s)", l.id.key, l.id.value, l.err, an.story(l.id))
	}
	t.Logf("OnLost reports: %d (%d of them for locks whose renewal raced their release)", len(lost), inWindow)
	if len(keys) != 0 {
		t.Errorf("keys left after every lock was released: got %q, want none", keys)
	}
	if an.extended == 0 || st.Renewals == 0 {
		t.Errorf("renewals: got %d in MONITOR, %d in Stats, want > 0: the sweeps did not race the releases", an.extended, st.Renewals)
	}
}

// calibrate finds the calibration EVAL and the ECHO its script ran, and
// reports whether the script's command was logged first.
func calibrate(lines []monLine, tag string) (luaFirst bool, err error) {
	eval, echo := -1, -1
	for i, l := range lines {
		switch {
		case !l.lua && l.name() == "eval" && len(l.args) == 4 && l.args[3] == tag:
			eval = i
		case l.lua && l.name() == "echo" && len(l.args) == 2 && l.args[1] == tag:
			echo = i
		}
	}
	if eval < 0 || echo < 0 {
		return false, fmt.Errorf("calibration: EVAL at %d, its ECHO at %d in the MONITOR stream; want both", eval, echo)
	}
	return echo < eval, nil
}

// renewalAnalysis is what the MONITOR stream shows about renewals and releases.
type renewalAnalysis struct {
	released map[lockID]int // first release script run per lock (stream index)
	returned map[lockID]int // the "released" marker per lock

	renewCalls   int            // renew script calls
	named        int            // (key, value) pairs they named
	extended     int            // PEXPIREs the renew script ran
	renewedLocks map[lockID]int // PEXPIREs per lock

	inWindow             int              // named after the release script, before the marker
	renewedAt            map[lockID][]int // stream indexes of the renew calls naming each lock
	afterReturn          []string         // named after the marker
	extendedAfterRelease []string         // PEXPIRE after the release script
	badScriptCmds        []string         // commands of the renew script other than GET/PEXPIRE of its keys
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// scriptOf returns the SHA1, KEYS and ARGV of an EVAL or EVALSHA.
func scriptOf(l monLine) (sha string, keys, argv []string, ok bool) {
	if len(l.args) < 3 {
		return "", nil, nil, false
	}
	switch l.name() {
	case "evalsha":
		sha = strings.ToLower(l.args[1])
	case "eval":
		sha = sha1Hex(l.args[1])
	default:
		return "", nil, nil, false
	}
	n, err := strconv.Atoi(l.args[2])
	if err != nil || n < 0 || 3+n > len(l.args) {
		return "", nil, nil, false
	}
	return sha, l.args[3 : 3+n], l.args[3+n:], true
}

func analyseRenewals(cmds []monLine, ran [][]monLine) renewalAnalysis {
	an := renewalAnalysis{released: map[lockID]int{}, returned: map[lockID]int{}, renewedLocks: map[lockID]int{}, renewedAt: map[lockID][]int{}}
	for i, c := range cmds {
		if c.name() == "echo" && len(c.args) == 2 {
			if f := strings.Fields(c.args[1]); len(f) == 3 && f[0] == releasedMarker {
				an.returned[lockID{f[1], f[2]}] = i
			}
			continue
		}
		sha, keys, argv, ok := scriptOf(c)
		if !ok {
			continue
		}
		switch sha {
		case redislockReleaseSHA1, redsyncDeleteSHA1:
			// A script call that ran nothing was refused (NOSCRIPT: the
			// client sends EVAL with the source next); the release script
			// always runs GET.
			if len(keys) == 1 && len(argv) >= 1 && len(ran[i]) > 0 {
				id := lockID{keys[0], argv[0]}
				if _, seen := an.released[id]; !seen {
					an.released[id] = i
				}
			}
		case scripts.RenewSHA1:
			an.renewCalls++
			inCall := make(map[string]bool, len(keys))
			for _, k := range keys {
				inCall[k] = true
			}
			pexpired := make(map[string]bool)
			for _, r := range ran[i] {
				switch {
				case r.name() == "mget" && len(r.args) >= 2 && allIn(r.args[1:], inCall):
				case (r.name() == "exists" || r.name() == "pexpire") && len(r.args) >= 2 && inCall[r.args[1]]:
					if r.name() == "pexpire" {
						pexpired[r.args[1]] = true
					}
				default:
					an.badScriptCmds = append(an.badScriptCmds, strings.Join(r.args, " "))
				}
			}
			for j, k := range keys {
				// ARGV: the keys' values, then their TTLs (one each, or
				// one for all).
				if j >= len(argv) {
					an.badScriptCmds = append(an.badScriptCmds, fmt.Sprintf("a call with no value for key %s", k))
					break
				}
				id := lockID{k, argv[j]}
				an.named++
				an.renewedAt[id] = append(an.renewedAt[id], i)
				if m, ok := an.returned[id]; ok {
					an.afterReturn = append(an.afterReturn, fmt.Sprintf("%s %s: renew call %d of the stream, release returned at %d", id.key, id.value, i, m))
				} else if _, ok := an.released[id]; ok {
					an.inWindow++
				}
				if pexpired[k] {
					an.extended++
					an.renewedLocks[id]++
					if r, ok := an.released[id]; ok {
						an.extendedAfterRelease = append(an.extendedAfterRelease, fmt.Sprintf("%s %s: renew call %d of the stream, release script at %d", id.key, id.value, i, r))
					}
				}
			}
		}
	}
	return an
}

// story tells where the renew calls naming id stand against its release
// script call and its release's return, as positions in the stream.
func (an renewalAnalysis) story(id lockID) string {
	rel, ok := an.released[id]
	if !ok {
		rel = -1
	}
	ret, ok := an.returned[id]
	if !ok {
		ret = -1
	}
	return fmt.Sprintf("renew calls at %v, release script at %d, release returned at %d, PEXPIREs %d", an.renewedAt[id], rel, ret, an.renewedLocks[id])
}

// renewedInWindow reports whether a renew call named id after its release
// script ran and before its release returned.
func (an renewalAnalysis) renewedInWindow(id lockID) bool {
	rel, okRel := an.released[id]
	ret, okRet := an.returned[id]
	if !okRel || !okRet {
		return false
	}
	for _, i := range an.renewedAt[id] {
		if rel < i && i < ret {
			return true
		}
	}
	return false
}

// renewedThenReleased counts the locks a renewal extended that were
// released afterwards: the sweeps caught them between obtain and release.
func (an renewalAnalysis) renewedThenReleased() int {
	n := 0
	for id := range an.renewedLocks {
		if _, ok := an.released[id]; ok {
			n++
		}
	}
	return n
}

// allIn reports whether every key is in set.
func allIn(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return true
}
