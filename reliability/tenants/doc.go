// Package tenants holds a reliability scenario of lockwatch about clients
// that come and go (issue 27): a multi-tenant service makes a go-redis
// client per tenant, watches it, locks through it and closes it when the
// tenant goes idle. A closed or dropped client must cost nothing after a
// while: the registry does not keep it alive, and the watchdog's lanes for
// it give back their goroutines and their place in Stats. It has no code of
// its own: everything is in its tests, which run against a real
// redis-server started by internal/testkit/testredis; they skip without one
// unless LOCKWATCH_REQUIRE_REDIS=1.
package tenants
