package sandbox

import (
	"context"
	"slices"
)

type launchEnvKey struct{}

// WithLaunchEnv returns a copy of ctx that makes Launch add env
// ("NAME=VALUE" entries) to the environment of the child it starts, over
// the launcher's own Env: the per-user credentials of one session's child.
// Only the child launched with this context gets them; a warm
// spare, started before its session, never does (Spares launches spares
// with a context of its own). The values are never logged.
func WithLaunchEnv(ctx context.Context, env []string) context.Context {
	return context.WithValue(ctx, launchEnvKey{}, slices.Clip(env))
}

// launchEnv is what WithLaunchEnv put in ctx, or nil.
func launchEnv(ctx context.Context) []string {
	env, _ := ctx.Value(launchEnvKey{}).([]string)
	return env
}
