package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// HealthStatus is the body of /livez.
type HealthStatus struct {
	Status string `json:"status" example:"ok"`
}

// ReadyStatus is the body of /readyz.
type ReadyStatus struct {
	Status string            `json:"status" enum:"ok,unavailable" example:"ok"`
	Checks map[string]string `json:"checks" doc:"Each check by name: ok, or why it failed."`
}

// ReadyCheck is one check of /readyz: Check returns nil when its part of the
// process is ready, else an error saying why not (served to anyone who asks,
// so it must not carry secrets).
type ReadyCheck struct {
	Name  string
	Check func(context.Context) error
	// Advisory checks are reported like the others but never make the
	// process unready: they watch a part it can do without (the read
	// pool, whose reads fall back to the primary).
	Advisory bool
}

// Pinger is what DatabaseCheck pings: a *store.Store, or a pool kept for
// readiness alone, so that a busy pool cannot make the check fail.
type Pinger interface {
	Ping(ctx context.Context) error
}

// DatabaseCheck is the "database" check: the database answers a ping
// through db. The cause of a failure is logged, not served.
func DatabaseCheck(db Pinger, log *slog.Logger) ReadyCheck {
	return ReadyCheck{Name: "database", Check: func(ctx context.Context) error {
		if err := db.Ping(ctx); err != nil {
			log.Warn("readiness: the database does not answer", "err", err)
			return errors.New("does not answer")
		}
		return nil
	}}
}

// CheckReady runs checks in order and returns the status they make and the
// names of those that failed, advisory ones apart (their failures are in
// the status's checks only).
func CheckReady(ctx context.Context, checks []ReadyCheck) (ReadyStatus, []string) {
	st := ReadyStatus{Status: "ok", Checks: make(map[string]string, len(checks))}
	var failed []string
	for _, c := range checks {
		if err := c.Check(ctx); err != nil {
			st.Checks[c.Name] = err.Error()
			if !c.Advisory {
				failed = append(failed, c.Name)
			}
			continue
		}
		st.Checks[c.Name] = "ok"
	}
	if failed != nil {
		st.Status = "unavailable"
	}
	return st, failed
}

// VersionInfo is the body of GET /api/v1/version.
type VersionInfo struct {
	Version string `json:"version" doc:"The server's build version." example:"v0.1.0"`
}

func (s *Server) registerHealth() {
	registerOp(s.api, huma.Operation{
		OperationID: "livez", Method: http.MethodGet, Path: "/livez", Tags: []string{"Health"},
		Summary: "Liveness", Description: "200 while the process serves HTTP. Never touches the database.",
	}, func(context.Context, *struct{}) (*bodyOutput[HealthStatus], error) {
		return &bodyOutput[HealthStatus]{Body: HealthStatus{Status: "ok"}}, nil
	})
	registerOp(s.api, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Tags: []string{"Health"},
		Summary: "Readiness",
		Description: "200 when every readiness check passes within the ready timeout: the database answers, its schema " +
			"is at this binary's migration version, and each duty of this process runs. Else 503, a problem naming " +
			"the failed checks in its detail and errors (location checks.<name>). With a read replica " +
			"(DATABASE_READ_URL) the read_database check says whether it answers, and never fails readiness: " +
			"reads fall back to the primary. With OIDC (OIDC_ISSUER_URL) the oidc check says whether the issuer's " +
			"discovery document has been fetched, and never fails readiness either: static tokens work without it.",
		Errors: []int{503},
	}, s.readyz)
	register(s, huma.Operation{
		OperationID: "get-version", Method: http.MethodGet, Path: "/version", Tags: []string{"Health"},
		Summary: "Server version",
	}, nil, func(context.Context, *struct{}) (*bodyOutput[VersionInfo], error) {
		return &bodyOutput[VersionInfo]{Body: VersionInfo{Version: s.cfg.Version}}, nil
	})
}

// ReadyChecks are the checks /readyz runs: Config.ReadyChecks (nil: the
// database's) and, with OIDC, the advisory "oidc" check (the issuer's
// discovery document fetched). A process serving /readyz on another
// listener too runs these there.
func (s *Server) ReadyChecks() []ReadyCheck {
	checks := s.cfg.ReadyChecks
	if checks == nil {
		checks = []ReadyCheck{DatabaseCheck(s.store, s.log)}
	}
	if c := s.auth.readyCheck(); c != nil {
		checks = append(slices.Clip(checks), *c)
	}
	return checks
}

func (s *Server) readyz(ctx context.Context, _ *struct{}) (*bodyOutput[ReadyStatus], error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	st, failed := CheckReady(ctx, s.ReadyChecks())
	if failed == nil {
		return &bodyOutput[ReadyStatus]{Body: st}, nil
	}
	errs := make([]ProblemError, len(failed))
	for i, name := range failed {
		errs[i] = ProblemError{Location: "checks." + name, Message: st.Checks[name]}
	}
	return nil, newProblem(http.StatusServiceUnavailable, typeUnavailable,
		"not ready: "+strings.Join(failed, ", ")+" failed", errs...).RetryAfter(RetryAfterUnreachable)
}
