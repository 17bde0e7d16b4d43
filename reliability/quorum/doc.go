// Package quorum holds reliability scenarios of lockwatch about redsync
// mutexes over several Redis servers (Redlock) and about the context
// Watchdog.Context hands out. It has no code of its own: everything is in
// its tests, which run against real redis-server processes started by
// internal/testredis; they skip without redis-server unless
// LOCKWATCH_REQUIRE_REDIS=1.
package quorum
