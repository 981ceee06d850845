package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// HealthStatus is the body of /livez and /readyz.
type HealthStatus struct {
	Status string `json:"status" example:"ok"`
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
		Summary: "Readiness", Description: "200 when the database answers a ping within the ready timeout, else 503.",
		Errors: []int{503},
	}, s.readyz)
	register(s, huma.Operation{
		OperationID: "get-version", Method: http.MethodGet, Path: "/version", Tags: []string{"Health"},
		Summary: "Server version",
	}, nil, func(context.Context, *struct{}) (*bodyOutput[VersionInfo], error) {
		return &bodyOutput[VersionInfo]{Body: VersionInfo{Version: s.cfg.Version}}, nil
	})
}

func (s *Server) readyz(ctx context.Context, _ *struct{}) (*bodyOutput[HealthStatus], error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("api: readiness ping failed", "err", err)
		return nil, newProblem(http.StatusServiceUnavailable, typeUnavailable, "the database does not answer").retryAfter(RetryAfterUnreachable)
	}
	return &bodyOutput[HealthStatus]{Body: HealthStatus{Status: "ok"}}, nil
}
