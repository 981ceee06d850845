package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// RoleBindingApply is the body of PUT /role-bindings/{name}.
type RoleBindingApply struct {
	Name        string `json:"name,omitempty" doc:"When present, must equal the path's name."`
	Role        string `json:"role" enum:"viewer,editor,operator,admin" doc:"The role granted; each includes the ones before it."`
	User        string `json:"user,omitempty" doc:"The user bound: an OIDC token's subject (its username claim). Exactly one of user and group."`
	Group       string `json:"group,omitempty" doc:"The group bound: every caller whose groups claim holds it. Exactly one of user and group."`
	Namespace   string `json:"namespace,omitempty" doc:"When present, must equal the namespace query parameter (default: default)."`
	ClusterWide bool   `json:"cluster_wide,omitempty" doc:"Grant the role in every namespace (and, for admin, over the cluster-wide objects); the binding then has no namespace."`
}

type roleBindingApplyBody struct {
	RoleBindingApply
	CreatedAt ignored `json:"created_at"`
	UpdatedAt ignored `json:"updated_at"`
}

// RoleBindingList is the body of GET /role-bindings.
type RoleBindingList struct {
	Items []store.RoleBinding `json:"items"`
}

type listRoleBindingsInput struct {
	Namespace string `query:"namespace" doc:"List the bindings that grant a role in this namespace: its own and the cluster-wide ones. * lists every binding (a cluster-wide role is needed). Default: default."`
	Role      string `query:"role" enum:"viewer,editor,operator,admin" doc:"Only bindings of this role."`
	User      string `query:"user" doc:"Only bindings of this user."`
	Group     string `query:"group" doc:"Only bindings of this group."`
}

type roleBindingInput struct {
	Name      string `path:"name" doc:"The binding's name."`
	Namespace string `query:"namespace" doc:"When present, the binding must grant its role in this namespace (be of it, or cluster-wide), or it is not found."`
}

type putRoleBindingInput struct {
	Name      string `path:"name" doc:"The binding's name."`
	Namespace string `query:"namespace" doc:"The namespace the role is granted in. Default: default. Not with cluster_wide."`
	RawBody   []byte
}

func (s *Server) registerRoleBindings() {
	register(s, huma.Operation{
		OperationID: "list-role-bindings", Method: http.MethodGet, Path: "/role-bindings", Tags: []string{"Access"},
		Summary: "List role bindings", Errors: []int{422},
		Description: "The bindings that grant a role in the namespace (its own and the cluster-wide ones), by name, " +
			"or with namespace=* every binding. Reading them needs the viewer role there.",
	}, nil, s.listRoleBindings)
	register(s, huma.Operation{
		OperationID: "get-role-binding", Method: http.MethodGet, Path: "/role-bindings/{name}", Tags: []string{"Access"},
		Summary: "Get a role binding", Errors: []int{404},
		Description: "Needs the viewer role in the binding's namespace; a cluster-wide binding, a role in any namespace.",
	}, nil, s.getRoleBinding)
	register(s, huma.Operation{
		OperationID: "put-role-binding", Method: http.MethodPut, Path: "/role-bindings/{name}", Tags: []string{"Access"},
		Summary: "Create or replace a role binding",
		Description: "Grants role to user or group in the namespace, or everywhere with cluster_wide. Creates (201) or replaces (200); " +
			"X-Apply-Result says created, configured or unchanged. Needs the admin role in the binding's namespace, and in the " +
			"namespace of the binding it replaces; a cluster-wide binding needs a cluster-wide admin. Takes effect at once.",
		Errors: []int{400, 422},
	}, RoleBindingApply{}, s.putRoleBinding)
	register(s, huma.Operation{
		OperationID: "delete-role-binding", Method: http.MethodDelete, Path: "/role-bindings/{name}", Tags: []string{"Access"},
		Summary: "Delete a role binding", DefaultStatus: http.StatusNoContent, Errors: []int{404},
		Description: "Needs the admin role in the binding's namespace; a cluster-wide binding, a cluster-wide admin. Takes effect at once.",
	}, nil, s.deleteRoleBinding)
}

// bindingNamespace checks a role binding route's namespace parameter:
// absent (the binding's own, or default) passes; otherwise it must name
// an existing namespace (404 otherwise), or with all, be *.
func (s *Server) bindingNamespace(ctx context.Context, ns string, all bool) *Problem {
	if ns == "" || all && ns == store.AllNamespaces {
		return nil
	}
	_, p := s.namespace(ctx, ns)
	return p
}

// bindingNamespaceExists refuses a binding of a namespace that does not
// exist (404 at body.namespace when the body named it, else at
// query.namespace); a malformed name is left to the store's 422.
func (s *Server) bindingNamespaceExists(ctx context.Context, ns string, inBody bool) *Problem {
	if !store.ValidNamespace(ns) {
		return nil
	}
	ok, err := s.store.NamespaceExists(ctx, ns)
	if err != nil {
		return s.problemFor(ctx, err, problemOpts{})
	}
	if ok {
		return nil
	}
	where := queryNamespace
	if inBody {
		where = "body.namespace"
	}
	msg := fmt.Sprintf("namespace %q does not exist", ns)
	return newProblem(http.StatusNotFound, typeNotFound, msg, ProblemError{Location: where, Message: msg, Value: ns})
}

func (s *Server) listRoleBindings(ctx context.Context, in *listRoleBindingsInput) (*bodyOutput[RoleBindingList], error) {
	if p := s.bindingNamespace(ctx, in.Namespace, true); p != nil {
		return nil, p
	}
	f := store.RoleBindingFilter{Namespace: cmp.Or(in.Namespace, store.DefaultNamespace), Role: in.Role, User: in.User, Group: in.Group}
	if f.Namespace == store.AllNamespaces {
		f.Namespace = ""
	}
	out, err := s.store.ListRoleBindings(ctx, f)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query"})
	}
	return &bodyOutput[RoleBindingList]{Body: RoleBindingList{Items: out}}, nil
}

// bindingIn returns nil, or a 404 when the request named a namespace b
// grants no role in.
func bindingIn(b store.RoleBinding, ns string) error {
	if ns == "" || b.ClusterWide || b.Namespace == ns {
		return nil
	}
	return &store.NotFoundError{Message: "role binding " + b.Name + " does not exist in namespace " + ns}
}

// requireOver checks that the caller holds r where b grants its role: in
// b's namespace, or cluster-wide for a cluster-wide binding.
func (s *Server) requireOver(ctx context.Context, r role, b store.RoleBinding) *Problem {
	if b.ClusterWide {
		return s.require(ctx, r, "", "")
	}
	return s.require(ctx, r, b.Namespace, "query.namespace")
}

func (s *Server) getRoleBinding(ctx context.Context, in *roleBindingInput) (*bodyOutput[store.RoleBinding], error) {
	if p := s.bindingNamespace(ctx, in.Namespace, false); p != nil {
		return nil, p
	}
	b, err := s.store.GetRoleBinding(ctx, in.Name)
	if err == nil {
		err = bindingIn(b, in.Namespace)
	}
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	// Every namespace's list shows the cluster-wide bindings: any role
	// anywhere reads one.
	perm := permission{roleViewer, inNamespace}
	if b.ClusterWide {
		perm.scope = anywhere
	}
	if p := s.check(ctx, perm, b.Namespace); p != nil {
		return nil, p
	}
	return &bodyOutput[store.RoleBinding]{Body: b}, nil
}

func (s *Server) putRoleBinding(ctx context.Context, in *putRoleBindingInput) (*applyOutput[store.RoleBinding], error) {
	var b roleBindingApplyBody
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	if in.Namespace != "" && !store.ValidNamespace(in.Namespace) {
		_, p := s.namespace(ctx, in.Namespace) // its 422 at query.namespace
		return nil, p
	}
	var bad *store.InvalidError
	switch {
	case b.Name != "" && b.Name != in.Name:
		bad = &store.InvalidError{Location: "name", Message: "must equal the path's name, " + in.Name}
	case b.ClusterWide && (in.Namespace != "" || b.Namespace != ""):
		bad = &store.InvalidError{Location: "cluster_wide", Message: "a cluster-wide binding has no namespace: leave out namespace (query and body)"}
	case b.Namespace != "" && in.Namespace != "" && b.Namespace != in.Namespace:
		bad = &store.InvalidError{Location: "namespace", Message: "must equal the namespace query parameter, " + in.Namespace}
	}
	echo := problemOpts{value: func(f string) any {
		switch f {
		case "role":
			return b.Role
		case "namespace":
			return b.Namespace
		}
		return nil
	}}
	if bad != nil {
		return nil, s.problemFor(ctx, bad, echo)
	}
	want := store.RoleBinding{Name: in.Name, Role: b.Role, User: b.User, Group: b.Group, ClusterWide: b.ClusterWide}
	if !b.ClusterWide {
		want.Namespace = cmp.Or(b.Namespace, in.Namespace, store.DefaultNamespace)
		if p := s.bindingNamespaceExists(ctx, want.Namespace, b.Namespace != ""); p != nil {
			return nil, p
		}
	}
	out, res, err := s.store.PutRoleBinding(ctx, want, func(old *store.RoleBinding) error {
		if old != nil {
			if p := s.requireOver(ctx, roleAdmin, *old); p != nil {
				return p
			}
		}
		if p := s.requireOver(ctx, roleAdmin, want); p != nil {
			return p
		}
		return nil
	})
	if err != nil {
		// The store names the body's fields; the name is the path's.
		var ie *store.InvalidError
		if errors.As(err, &ie) && ie.Location == "name" {
			echo.in = "path"
		}
		return nil, s.problemFor(ctx, err, echo)
	}
	s.bindings.invalidate()
	return &applyOutput[store.RoleBinding]{Status: applyStatus(res), ApplyResult: res, Body: out}, nil
}

func (s *Server) deleteRoleBinding(ctx context.Context, in *roleBindingInput) (*struct{}, error) {
	if p := s.bindingNamespace(ctx, in.Namespace, false); p != nil {
		return nil, p
	}
	err := s.store.DeleteRoleBinding(ctx, in.Name, func(b store.RoleBinding) error {
		if err := bindingIn(b, in.Namespace); err != nil {
			return err
		}
		if p := s.requireOver(ctx, roleAdmin, b); p != nil {
			return p
		}
		return nil
	})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	s.bindings.invalidate()
	return nil, nil
}
