package watchdog

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// hashTag returns the part of key a Ring hashes: the {tag} when there is
// one, as go-redis does.
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n]
		}
	}
	return key
}

// shardClient returns the Ring's client of the shard at addr, nil while
// the Ring has not shown it live.
func (c *client) shardClient(addr string) *redis.Client {
	c.shardMu.Lock()
	cl := c.shards[addr]
	c.shardMu.Unlock()
	if cl != nil {
		return cl
	}
	ctx, cancel := context.WithTimeout(c.w.ctx, time.Second)
	defer cancel()
	_ = c.ring.ForEachShard(ctx, func(_ context.Context, s *redis.Client) error {
		c.shardMu.Lock()
		defer c.shardMu.Unlock()
		if c.shards == nil {
			c.shards = make(map[string]*redis.Client)
		}
		c.shards[s.Options().Addr] = s
		return nil
	})
	c.shardMu.Lock()
	defer c.shardMu.Unlock()
	return c.shards[addr]
}
