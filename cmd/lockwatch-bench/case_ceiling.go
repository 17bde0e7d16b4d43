package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ceilingScript is an owner-checked PEXPIRE of one key.
var ceilingScript = redis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`)

func setupCeiling(ctx context.Context, addr, prefix string, n int) (bench, error) {
	return setupTable(ctx, addr, prefix, n, "ceiling", ceilingSweep)
}

// ceilingSweep renews the table with one single-key script call per lock,
// pipelined ceilingBatch at a time on one connection.
func ceilingSweep(ctx context.Context, c *redis.Client, t ownedTable, _ func(int) error) (int, error) {
	ttl := lockTTL.Milliseconds()
	renewed := 0
	pipe := c.Pipeline()
	var cmds []*redis.Cmd
	flush := func() error {
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, cmd := range cmds {
			if cmd.Val() == int64(1) {
				renewed++
			}
		}
		cmds = cmds[:0]
		return nil
	}
	for k, v := range t {
		cmds = append(cmds, ceilingScript.EvalSha(ctx, pipe, []string{k}, v, ttl))
		if len(cmds) == ceilingBatch {
			if err := flush(); err != nil {
				return renewed, err
			}
		}
	}
	if len(cmds) > 0 {
		if err := flush(); err != nil {
			return renewed, err
		}
	}
	return renewed, nil
}
