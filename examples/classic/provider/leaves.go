package provider

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/convergeplane/converge/webhooksdk"
)

// leaf is the provider of a simulated kind: work answers its specChange and
// operation reactions; the teardown and the fault knobs are common to all.
func leaf(kind string, version int, o Options, work func(req webhooksdk.Request) (webhooksdk.Outcome, error)) webhooksdk.Provider {
	return webhooksdk.WorkFunc(kind, version, func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		if fault(o.FaultRate) {
			return webhooksdk.Outcome{}, errFault
		}
		if req.TaskType == webhooksdk.TaskDelete {
			return teardown(ctx, o, req)
		}
		if err := sleep(ctx, o.WorkDelay); err != nil {
			return webhooksdk.Outcome{}, err
		}
		return work(req)
	})
}

type accountSpec struct {
	TeamName string `json:"team_name"`
}

// account reports a 12-digit account id derived from the resource's name, the
// shape vpc's spec schema requires of the account_id that flows into it.
func account(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec accountSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	return status(map[string]any{"account_id": accountID(req.Resource.Name), "team_name": spec.TeamName})
}

func accountID(name string) string { return fmt.Sprintf("%012d", hash(name)%1_000_000_000_000) }

type vpcSpec struct {
	AccountID string            `json:"account_id"`
	CIDR      string            `json:"cidr"`
	Region    string            `json:"region,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
}

// vpc serves both versions: v1 and v2 differ only in v2's required region,
// which v2 echoes into status so an operator can see which version ran.
func vpc(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec vpcSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	st := map[string]any{"vpc_id": simulatedID("vpc", req.Resource.Name), "account_id": spec.AccountID, "cidr": spec.CIDR}
	if req.KindVersion >= 2 {
		st["region"] = spec.Region
	}
	if req.Reaction != "enable_flow_logs" {
		return status(st)
	}
	var cfg struct {
		FlowLogsBucket string `json:"flow_logs_bucket"`
	}
	if len(req.Config) > 0 {
		if err := json.Unmarshal(req.Config, &cfg); err != nil {
			return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("decode vpc config: %w", err))
		}
	}
	if cfg.FlowLogsBucket == "" {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("enable_flow_logs: the vpc/%d provider config names no flow_logs_bucket", req.KindVersion))
	}
	// Turning flow logs on twice is the same as once, so a redelivered
	// operation (same req.TaskID) needs no bookkeeping.
	st["flow_logs"] = true
	out, err := status(st)
	if err != nil {
		return out, err
	}
	out.OperationOutput, err = json.Marshal(map[string]any{"flow_logs": true, "bucket": cfg.FlowLogsBucket, "operation_id": req.TaskID})
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode operation output: %w", err)
	}
	return out, nil
}

type tgwSpec struct {
	Name      string `json:"name"`
	AccountID string `json:"account_id,omitempty"`
}

func tgw(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec tgwSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	return status(map[string]any{"tgw_id": simulatedID("tgw", spec.Name), "account_id": spec.AccountID})
}

type routeSpec struct {
	VPCID string `json:"vpc_id,omitempty"`
	TGWID string `json:"tgw_id,omitempty"`
}

func route(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec routeSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	switch {
	case spec.VPCID == "":
		return webhooksdk.Outcome{}, notFlowed("vpc_id")
	case spec.TGWID == "":
		return webhooksdk.Outcome{}, notFlowed("tgw_id")
	}
	return status(map[string]any{"route_id": simulatedID("rtb", spec.VPCID+"/"+spec.TGWID), "vpc_id": spec.VPCID, "tgw_id": spec.TGWID})
}
