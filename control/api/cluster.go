package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// ClusterLiveness is how old a member's last heartbeat may be for it to
// count as Ready: three missed 10-second beats, the window routing uses.
const ClusterLiveness = 30 * time.Second

// ClusterList is the body of GET /cluster-members.
type ClusterList struct {
	Items []store.ClusterMember `json:"items"`
}

func (s *Server) registerCluster() {
	register(s, huma.Operation{
		OperationID: "list-cluster-members", Method: http.MethodGet, Path: "/cluster-members", Tags: []string{"Cluster"},
		Summary: "List the running converge processes",
		Description: "Each member's role, shard range, in-flight tasks, version and last heartbeat. Ready is derived from the " +
			"heartbeat's age (three missed beats); a crashed member stays listed, not ready, for an hour, then the reaper forgets it.",
	}, nil, s.listClusterMembers)
}

func (s *Server) listClusterMembers(ctx context.Context, _ *struct{}) (*bodyOutput[ClusterList], error) {
	ms, err := s.store.ListClusterMembers(ctx, ClusterLiveness)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	if ms == nil {
		ms = []store.ClusterMember{}
	}
	return &bodyOutput[ClusterList]{Body: ClusterList{Items: ms}}, nil
}
