module github.com/lockwatch/lockwatch/examples/gocron

go 1.25

// gocron v2.2.6 is the first gocron v2 release in which a replica that does
// not get a job's lock keeps scheduling that job (before it, the job was
// never scheduled again in that replica). gocron-redis-lock v2.0.1 is the
// official Redis locker's first v2 release built against a gocron v2 release
// (v2.0.0 names a release candidate): redsync on a go-redis v9 client, which
// lockwatch's goredsync adapter watches. Both build and pass the test on the
// newest releases too (gocron v2.21.2, gocron-redis-lock v2.2.1).
require (
	github.com/go-co-op/gocron-redis-lock/v2 v2.0.1
	github.com/go-co-op/gocron/v2 v2.2.6
	github.com/lockwatch/lockwatch v0.1.0
	github.com/redis/go-redis/v9 v9.7.1
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-redsync/redsync/v4 v4.12.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/jonboulle/clockwork v0.4.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/exp v0.0.0-20231219180239-dc181d75b848 // indirect
)

// The example builds against the root module of this checkout (it is no
// release: nothing requires it).
replace github.com/lockwatch/lockwatch => ../..
