package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
)

// hookResult is the -json "hook" object: what watching a client adds to a
// command that is not a lock command.
type hookResult struct {
	OverheadNS  float64 `json:"overhead_ns"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	// Per command: watched and unwatched ns/op, medians of the rounds.
	GetNS      [2]float64 `json:"get_ns"`
	SetNS      [2]float64 `json:"set_ns"`
	SetAllocs  float64    `json:"set_allocs_per_op"`
	GetOverNS  float64    `json:"get_overhead_ns"`
	SetOverNS  float64    `json:"set_overhead_ns"`
	Rounds     int        `json:"rounds"`
	Comparison string     `json:"comparison"`
}

// answer is the innermost hook of the measured clients: it answers GET and
// SET itself, so that the figures are the client's and the hooks' work
// without a network or a server.
type answer struct{}

func (answer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (answer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.StringCmd:
			c.SetVal("value")
		case *redis.StatusCmd:
			c.SetVal("OK")
		}
		return nil
	}
}

func (answer) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return nil }
}

// newAnswered returns a client that never dials, optionally watched by a
// registry with both adapters.
func newAnswered(watched bool) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	if watched {
		if err := registry.New(bsmredislock.New(), goredsync.New()).Watch(c); err != nil {
			return nil, err
		}
	}
	c.AddHook(answer{})
	return c, nil
}

// hookBlock is the number of commands timed in one block.
const hookBlock = 100_000

// measureHook times GET and SET (without NX) through a watched and an
// unwatched client in alternating blocks, rounds times, and reports the
// medians of the per-round differences: on a shared machine the load that
// slows one block slows its neighbour too.
func measureHook(rounds int) (hookResult, error) {
	plain, err := newAnswered(false)
	if err != nil {
		return hookResult{}, err
	}
	defer plain.Close()
	watched, err := newAnswered(true)
	if err != nil {
		return hookResult{}, err
	}
	defer watched.Close()
	ctx := context.Background()
	get := func(c *redis.Client) func() { return func() { _ = c.Get(ctx, "user:42") } }
	set := func(c *redis.Client) func() { return func() { _ = c.Set(ctx, "user:42", "value", 0) } }
	block := func(f func()) float64 {
		t := time.Now()
		for range hookBlock {
			f()
		}
		return float64(time.Since(t).Nanoseconds()) / hookBlock
	}
	// Warm both clients up (pools of command objects, caches).
	for _, f := range []func(){get(plain), get(watched), set(plain), set(watched)} {
		block(f)
	}
	var getW, getP, setW, setP, getD, setD []float64
	for r := range rounds {
		var gp, gw, sp, sw float64
		if r%2 == 0 {
			gp, gw, sp, sw = block(get(plain)), block(get(watched)), block(set(plain)), block(set(watched))
		} else {
			gw, gp, sw, sp = block(get(watched)), block(get(plain)), block(set(watched)), block(set(plain))
		}
		getP, getW, setP, setW = append(getP, gp), append(getW, gw), append(setP, sp), append(setW, sw)
		getD, setD = append(getD, gw-gp), append(setD, sw-sp)
	}
	allocs := func(f func()) float64 { return testing.AllocsPerRun(10_000, f) }
	h := hookResult{
		GetNS:      [2]float64{median(getW), median(getP)},
		SetNS:      [2]float64{median(setW), median(setP)},
		GetOverNS:  median(getD),
		SetOverNS:  median(setD),
		SetAllocs:  allocs(set(watched)) - allocs(set(plain)),
		Rounds:     rounds,
		Comparison: "GET and SET (no NX) through a go-redis client watched by a registry with both adapters vs an unwatched one, answered in-process by an innermost hook, in alternating blocks of 100k commands",
	}
	h.OverheadNS = max(h.GetOverNS, h.SetOverNS)
	h.AllocsPerOp = max(allocs(get(watched))-allocs(get(plain)), h.SetAllocs)
	return h, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
