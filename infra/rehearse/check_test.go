package rehearse

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/rds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	logs "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
)

// clients are the service APIs the checks read.
type clients struct {
	iam    *iam.Client
	lambda *lambda.Client
	logs   *logs.Client
	sns    *sns.Client
	sqs    *sqs.Client
	ecs    *ecs.Client
	elb    *elbv2.Client
	ec2    *ec2.Client
	rds    *rds.Client
	s3     *s3.Client
}

// A resource under check: its physical ID, its properties as deployed, and
// the stack's physical IDs and parameter values to resolve Refs with.
type resource struct {
	id, physical string
	props        map[string]any
	st           *stack
	params       map[string]string
}

// literal returns a property's value when the template states it (or Refs a
// parameter), and false when CloudFormation computes it.
func (r resource) literal(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case float64:
		return fmt.Sprint(v), true
	case map[string]any:
		if ref, ok := v["Ref"].(string); ok && len(v) == 1 {
			if p, ok := r.params[ref]; ok {
				return p, true
			}
		}
	}
	return "", false
}

// ref resolves {"Ref": logicalID} to its physical ID.
func (r resource) ref(v any) string {
	if m, ok := v.(map[string]any); ok {
		if id, ok := m["Ref"].(string); ok {
			return r.st.physical[id]
		}
	}
	s, _ := v.(string)
	return s
}

// same fails when the template states want and the service reports another value.
func (r resource) same(what string, want any, got string) error {
	if w, ok := r.literal(want); ok && w != got {
		return fmt.Errorf("%s is %q, the template says %q", what, got, w)
	}
	return nil
}

// A checker reads one resource back through its service's API.
type checker func(ctx context.Context, c clients, r resource) error

// checkers are the resource types read back after each deploy; a type moto
// creates but that is not here is checked by CloudFormation's own listing only.
var checkers = map[string]checker{
	"AWS::IAM::Role": func(ctx context.Context, c clients, r resource) error {
		role, err := c.iam.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(r.physical)})
		if err != nil {
			return err
		}
		if doc, _ := url.QueryUnescape(aws.ToString(role.Role.AssumeRolePolicyDocument)); !containsActions(doc, r.props["AssumeRolePolicyDocument"]) {
			return fmt.Errorf("trust policy %s lacks the template's actions", doc)
		}
		for _, p := range list(r.props["Policies"]) {
			name, _ := p.(map[string]any)["PolicyName"].(string)
			out, err := c.iam.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(r.physical), PolicyName: aws.String(name)})
			if err != nil {
				return fmt.Errorf("inline policy %s: %w", name, err)
			}
			if doc, _ := url.QueryUnescape(aws.ToString(out.PolicyDocument)); !containsActions(doc, p.(map[string]any)["PolicyDocument"]) {
				return fmt.Errorf("inline policy %s lacks the template's actions: %s", name, doc)
			}
		}
		return nil
	},
	"AWS::IAM::Policy": func(ctx context.Context, c clients, r resource) error {
		name, _ := r.props["PolicyName"].(string)
		for _, role := range list(r.props["Roles"]) {
			out, err := c.iam.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(r.ref(role)), PolicyName: aws.String(name)})
			if err != nil {
				return fmt.Errorf("policy %s on role %s: %w", name, r.ref(role), err)
			}
			if doc, _ := url.QueryUnescape(aws.ToString(out.PolicyDocument)); !containsActions(doc, r.props["PolicyDocument"]) {
				return fmt.Errorf("policy %s lacks the template's actions: %s", name, doc)
			}
		}
		return nil
	},
	// moto's CloudFormation model of a function drops Architectures (it
	// reports x86_64 for every function) and TracingConfig (PassThrough):
	// the CDK assertion tests and check-sam's rules check those instead.
	"AWS::Lambda::Function": func(ctx context.Context, c clients, r resource) error {
		out, err := c.lambda.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.physical)})
		if err != nil {
			return err
		}
		fc := out.Configuration
		var envNames, wantEnv []string
		if fc.Environment != nil {
			for k := range fc.Environment.Variables {
				envNames = append(envNames, k)
			}
		}
		if env, ok := r.props["Environment"].(map[string]any); ok {
			for k := range env["Variables"].(map[string]any) {
				wantEnv = append(wantEnv, k)
			}
		}
		sort.Strings(envNames)
		sort.Strings(wantEnv)
		if strings.Join(envNames, ",") != strings.Join(wantEnv, ",") {
			return fmt.Errorf("environment %v, the template sets %v", envNames, wantEnv)
		}
		for _, e := range []error{
			r.same("runtime", r.props["Runtime"], string(fc.Runtime)),
			r.same("handler", r.props["Handler"], aws.ToString(fc.Handler)),
			r.same("timeout", r.props["Timeout"], fmt.Sprint(aws.ToInt32(fc.Timeout))),
			r.same("memory", r.props["MemorySize"], fmt.Sprint(aws.ToInt32(fc.MemorySize))),
			r.same("reserved concurrency", r.props["ReservedConcurrentExecutions"], reserved(out.Concurrency)),
		} {
			if e != nil {
				return e
			}
		}
		return nil
	},
	"AWS::Logs::LogGroup": func(ctx context.Context, c clients, r resource) error {
		out, err := c.logs.DescribeLogGroups(ctx, &logs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(r.physical)})
		if err != nil {
			return err
		}
		for _, g := range out.LogGroups {
			if aws.ToString(g.LogGroupName) == r.physical {
				return r.same("retention", r.props["RetentionInDays"], fmt.Sprint(aws.ToInt32(g.RetentionInDays)))
			}
		}
		return fmt.Errorf("no log group %s", r.physical)
	},
	"AWS::SNS::Topic": func(ctx context.Context, c clients, r resource) error {
		_, err := c.sns.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(r.physical)})
		return err
	},
	"AWS::SQS::Queue": func(ctx context.Context, c clients, r resource) error {
		_, err := c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.physical)})
		return err
	},
	"AWS::ECS::Cluster": func(ctx context.Context, c clients, r resource) error {
		out, err := c.ecs.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{r.physical}})
		if err == nil && len(out.Clusters) != 1 {
			err = fmt.Errorf("no cluster %s", r.physical)
		}
		return err
	},
	"AWS::ECS::TaskDefinition": func(ctx context.Context, c clients, r resource) error {
		out, err := c.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(r.physical)})
		if err != nil {
			return err
		}
		images := map[string]string{}
		for _, cd := range out.TaskDefinition.ContainerDefinitions {
			images[aws.ToString(cd.Name)] = aws.ToString(cd.Image)
		}
		for _, cd := range list(r.props["ContainerDefinitions"]) {
			m := cd.(map[string]any)
			name, _ := m["Name"].(string)
			got, ok := images[name]
			if !ok {
				return fmt.Errorf("no container %s", name)
			}
			if err := r.same("container "+name+"'s image", m["Image"], got); err != nil {
				return err
			}
		}
		return nil
	},
	"AWS::ECS::Service": func(ctx context.Context, c clients, r resource) error {
		out, err := c.ecs.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(r.ref(r.props["Cluster"])), Services: []string{r.physical}})
		if err == nil && len(out.Services) != 1 {
			err = fmt.Errorf("no service %s in cluster %s", r.physical, r.ref(r.props["Cluster"]))
		}
		return err
	},
	"AWS::ElasticLoadBalancingV2::LoadBalancer": func(ctx context.Context, c clients, r resource) error {
		_, err := c.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{LoadBalancerArns: []string{r.physical}})
		return err
	},
	"AWS::ElasticLoadBalancingV2::TargetGroup": func(ctx context.Context, c clients, r resource) error {
		_, err := c.elb.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{TargetGroupArns: []string{r.physical}})
		return err
	},
	"AWS::ElasticLoadBalancingV2::Listener": func(ctx context.Context, c clients, r resource) error {
		out, err := c.elb.DescribeListeners(ctx, &elbv2.DescribeListenersInput{ListenerArns: []string{r.physical}})
		if err == nil && len(out.Listeners) == 1 {
			err = r.same("port", r.props["Port"], fmt.Sprint(aws.ToInt32(out.Listeners[0].Port)))
		}
		return err
	},
	"AWS::EC2::VPC": func(ctx context.Context, c clients, r resource) error {
		_, err := c.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{r.physical}})
		return err
	},
	"AWS::EC2::VPCEndpoint": func(ctx context.Context, c clients, r resource) error {
		out, err := c.ec2.DescribeVpcEndpoints(ctx, &ec2.DescribeVpcEndpointsInput{VpcEndpointIds: []string{r.physical}})
		if err == nil && len(out.VpcEndpoints) == 1 {
			err = r.same("endpoint type", r.props["VpcEndpointType"], string(out.VpcEndpoints[0].VpcEndpointType))
		}
		return err
	},
	"AWS::S3::Bucket": func(ctx context.Context, c clients, r resource) error {
		_, err := c.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(r.physical)})
		return err
	},
	"AWS::EC2::Subnet": func(ctx context.Context, c clients, r resource) error {
		_, err := c.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{r.physical}})
		return err
	},
	"AWS::EC2::SecurityGroup": func(ctx context.Context, c clients, r resource) error {
		_, err := c.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{r.physical}})
		return err
	},
	// moto lists a subnet group without its physical ID (its name): found
	// by the template's description instead.
	"AWS::RDS::DBSubnetGroup": func(ctx context.Context, c clients, r resource) error {
		out, err := c.rds.DescribeDBSubnetGroups(ctx, &rds.DescribeDBSubnetGroupsInput{})
		if err != nil {
			return err
		}
		for _, g := range out.DBSubnetGroups {
			if aws.ToString(g.DBSubnetGroupDescription) == r.props["DBSubnetGroupDescription"] {
				if len(g.Subnets) != len(list(r.props["SubnetIds"])) {
					return fmt.Errorf("%d subnets, the template lists %d", len(g.Subnets), len(list(r.props["SubnetIds"])))
				}
				return nil
			}
		}
		return fmt.Errorf("no subnet group described %q", r.props["DBSubnetGroupDescription"])
	},
}

func reserved(c *lambdatypes.Concurrency) string {
	if c == nil {
		return ""
	}
	return fmt.Sprint(aws.ToInt32(c.ReservedConcurrentExecutions))
}

func list(v any) []any { l, _ := v.([]any); return l }

// containsActions reports whether a policy document (JSON text) names every
// action the template's policy document grants.
func containsActions(doc string, tmplDoc any) bool {
	m, _ := tmplDoc.(map[string]any)
	for _, s := range list(m["Statement"]) {
		acts := s.(map[string]any)["Action"]
		if a, ok := acts.(string); ok {
			acts = []any{a}
		}
		for _, a := range list(acts) {
			if !strings.Contains(doc, fmt.Sprint(a)) {
				return false
			}
		}
	}
	return true
}
