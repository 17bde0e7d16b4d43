// Package lockwatch is the root of a module that keeps Redis locks alive
// while the process holding them is still working, for applications that
// already lock with github.com/bsm/redislock or
// github.com/go-redsync/redsync/v4 on github.com/redis/go-redis/v9.
//
// Nothing in the business code changes. At start-up a registry is hooked
// into each go-redis client the application locks with; it learns which
// locks this process obtains, refreshes and releases. A watchdog attached to
// the registry renews the tracked locks with an owner-checked Lua script
// that only moves a key's expiry (PEXPIRE; PEXPIREAT on Redis 7) and never
// creates a key, so a lock's TTL only has to cover a crash, not
// the longest job. This package itself holds no code: the work is done by
// the packages below.
//
// # Start-up
//
//	reg := registry.New(bsmredislock.New(), goredsync.New())
//	if err := reg.Watch(rdb); err != nil { ... } // once per client, before use
//	wd, err := watchdog.Attach(reg)               // version guard, then "@every 10s"
//	if err != nil { ... }
//	defer wd.Stop()
//
// Attach refuses to start, with an error matching
// [github.com/lockwatch/lockwatch/registry.ErrUpstreamChanged], when the linked upstream library sends Lua
// scripts lockwatch has not pinned.
//
// # Packages
//
//   - [github.com/lockwatch/lockwatch/registry]: the table of held locks per
//     watched client, the go-redis hook that feeds it, the Adapter
//     interface, events and errors.
//   - [github.com/lockwatch/lockwatch/watchdog]: the renewal policy (cron
//     schedule, fast lane for short TTLs, max hold, filter), loss reporting
//     and Stats.
//   - github.com/lockwatch/lockwatch/adapters/bsmredislock and
//     [github.com/lockwatch/lockwatch/adapters/goredsync]: recognise the lock
//     commands of one upstream library each, with its pinned script hashes
//     and the probe behind the version guard.
//   - [github.com/lockwatch/lockwatch/scripts]: lockwatch's own Lua (the
//     multi-key owner-checked renew script) with its pinned SHA1.
//   - [github.com/lockwatch/lockwatch/cmd/lockwatch-demo]: a runnable job
//     that holds a redislock lock and a redsync mutex for longer than three
//     of their TTLs while a contender keeps failing to take them.
package lockwatch
