package main

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/jsii-runtime-go"
)

// interfaceEndpoints are the AWS APIs the tasks call, each given an
// interface endpoint with private DNS: Secrets Manager (the keys and ECS's
// secret injection), KMS (their decryption), ECR api and dkr (the image
// pull), CloudWatch Logs (the awslogs driver and the metrics agent's EMF
// logs), STS (the dispatcher assumes an endpoint's role_arn) and Lambda
// (the dispatcher's invokes; Function URLs are not behind it and still use
// the internet). No CloudWatch monitoring endpoint: the metrics agent
// publishes through Logs (embedded metric format), not PutMetricData.
var interfaceEndpoints = map[string]awsec2.InterfaceVpcEndpointAwsService{
	"SecretsManager": awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER(),
	"Kms":            awsec2.InterfaceVpcEndpointAwsService_KMS(),
	"EcrApi":         awsec2.InterfaceVpcEndpointAwsService_ECR(),
	"EcrDocker":      awsec2.InterfaceVpcEndpointAwsService_ECR_DOCKER(),
	"Logs":           awsec2.InterfaceVpcEndpointAwsService_CLOUDWATCH_LOGS(),
	"Sts":            awsec2.InterfaceVpcEndpointAwsService_STS(),
	"Lambda":         awsec2.InterfaceVpcEndpointAwsService_LAMBDA(),
}

// addEndpoints adds the interface endpoints, in the tasks' subnets behind
// a security group admitting the tasks only, and an S3 gateway endpoint
// (ECR serves image layers from S3).
func addEndpoints(stack awscdk.Stack, vpc awsec2.Vpc, tasks ...awsecs.FargateService) {
	subnets := &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC}
	sg := awsec2.NewSecurityGroup(stack, jsii.String("EndpointsSg"), &awsec2.SecurityGroupProps{
		Vpc: vpc, AllowAllOutbound: jsii.Bool(false), Description: jsii.String("Converge VPC interface endpoints: HTTPS from the tasks"),
	})
	for _, t := range tasks {
		sg.Connections().AllowFrom(t, awsec2.Port_Tcp(jsii.Number(443)), jsii.String("tasks to AWS APIs"))
	}
	for id, svc := range interfaceEndpoints {
		vpc.AddInterfaceEndpoint(jsii.String(id), &awsec2.InterfaceVpcEndpointOptions{
			Service: svc, Subnets: subnets, SecurityGroups: &[]awsec2.ISecurityGroup{sg},
			Open: jsii.Bool(false), PrivateDnsEnabled: jsii.Bool(true),
		})
	}
	vpc.AddGatewayEndpoint(jsii.String("S3"), &awsec2.GatewayVpcEndpointOptions{
		Service: awsec2.GatewayVpcEndpointAwsService_S3(), Subnets: &[]*awsec2.SubnetSelection{subnets},
	})
}

// endpointCIDRs are the ranges of the subnets the interface endpoints live
// in, for the dispatcher's DISPATCH_ALLOW_CIDRS. With private DNS, Lambda's
// and STS's regional names resolve to the endpoints' addresses there, which
// the dispatcher's egress guard refuses unless allowed: without this, every
// Invoke and every AssumeRole of a role_arn endpoint is blocked. What else
// those subnets hold cannot be reached through it: the tasks' groups admit
// only the load balancer, whose HTTPS listener is public anyway.
func endpointCIDRs(vpc awsec2.Vpc) string {
	var cidrs []string
	for _, s := range *vpc.PublicSubnets() {
		cidrs = append(cidrs, *s.Ipv4CidrBlock())
	}
	return strings.Join(cidrs, ",")
}
