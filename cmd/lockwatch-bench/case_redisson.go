package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// redissonScript renews a batch the way Redisson's watchdog does: one lease
// time for the batch (ARGV[1]), each key's owner in ARGV[i+1]; a key is
// extended only while it holds its owner's value.
var redissonScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) == ARGV[i + 1] then
    out[i] = redis.call("pexpire", KEYS[i], ARGV[1])
  else
    out[i] = 0
  end
end
return out`)

func setupRedissonStyle(ctx context.Context, addr, prefix string, n int) (bench, error) {
	return setupTable(ctx, addr, prefix, n, "redisson-style", redissonSweep)
}

// redissonSweep renews the table in chunks of 100 keys, one script call
// after another, and ends the sweep at the first chunk that fails, as
// Redisson's renewal task does. fail, when not nil, may inject an error for
// chunk i. It returns the number of locks renewed.
func redissonSweep(ctx context.Context, c *redis.Client, t ownedTable, fail func(int) error) (int, error) {
	keys := make([]string, 0, redissonChunk)
	args := make([]any, 1, redissonChunk+1)
	args[0] = lockTTL.Milliseconds()
	renewed, chunk := 0, 0
	flush := func() error {
		defer func() { keys, args, chunk = keys[:0], args[:1], chunk+1 }()
		if fail != nil {
			if err := fail(chunk); err != nil {
				return err
			}
		}
		res, err := redissonScript.EvalSha(ctx, c, keys, args...).Int64Slice()
		if err != nil {
			return err
		}
		for _, r := range res {
			if r == 1 {
				renewed++
			}
		}
		return nil
	}
	for k, v := range t {
		keys = append(keys, k)
		args = append(args, v)
		if len(keys) == redissonChunk {
			if err := flush(); err != nil {
				return renewed, err
			}
		}
	}
	if len(keys) > 0 {
		if err := flush(); err != nil {
			return renewed, err
		}
	}
	return renewed, nil
}
