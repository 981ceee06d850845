package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscertificatemanager"
	elbv2 "github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsroute53"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsroute53targets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/jsii-runtime-go"
)

// certificate is the HTTPS listener's: the imported CertificateArn, else
// one ACM issues for DomainName, validated by DNS in the hosted zone. With
// a hosted zone, DomainName also gets an alias record to the load balancer.
func certificate(stack awscdk.Stack, cfg Config, alb elbv2.ApplicationLoadBalancer) awscertificatemanager.ICertificate {
	var zone awsroute53.IHostedZone
	if cfg.HostedZoneID != "" {
		zone = awsroute53.HostedZone_FromHostedZoneAttributes(stack, jsii.String("Zone"), &awsroute53.HostedZoneAttributes{
			HostedZoneId: jsii.String(cfg.HostedZoneID), ZoneName: jsii.String(cfg.HostedZoneName),
		})
		// An A alias only: the load balancer and the VPC are IPv4-only, so an
		// AAAA alias would resolve to nothing.
		awsroute53.NewARecord(stack, jsii.String("AliasRecord"), &awsroute53.ARecordProps{
			Zone: zone, RecordName: jsii.String(cfg.DomainName),
			Target: awsroute53.RecordTarget_FromAlias(awsroute53targets.NewLoadBalancerTarget(alb, nil)),
		})
	}
	if cfg.CertificateArn != "" {
		return awscertificatemanager.Certificate_FromCertificateArn(stack, jsii.String("Certificate"), jsii.String(cfg.CertificateArn))
	}
	return awscertificatemanager.NewCertificate(stack, jsii.String("Certificate"), &awscertificatemanager.CertificateProps{
		DomainName: jsii.String(cfg.DomainName),
		Validation: awscertificatemanager.CertificateValidation_FromDns(zone),
	})
}

// logAccess sends the load balancer's access logs to a bucket of their own:
// SSE-S3 (ELB log delivery cannot write with a KMS key), versioned,
// TLS-only, private, objects expiring after cfg.AccessLogRetentionDays.
// The bucket outlives the stack: logs are evidence.
func logAccess(stack awscdk.Stack, cfg Config, alb elbv2.ApplicationLoadBalancer) awss3.Bucket {
	days := awscdk.Duration_Days(jsii.Number(float64(cfg.AccessLogRetentionDays)))
	bucket := awss3.NewBucket(stack, jsii.String("AccessLogs"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		Versioned:         jsii.Bool(true),
		EnforceSSL:        jsii.Bool(true),
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Expiration: days, NoncurrentVersionExpiration: awscdk.Duration_Days(jsii.Number(1)),
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		}},
	})
	alb.LogAccessLogs(bucket, jsii.String("alb"))
	suppress(bucket, "AwsSolutions-S1", "This bucket holds the load balancer's access logs; logging its own accesses would need a second bucket whose accesses in turn go unlogged. Writes come only from ELB log delivery (bucket policy), and CloudTrail data events can audit reads.")
	return bucket
}

// managedRuleGroups are the AWS managed WAF rule groups in front of the
// load balancer, in priority order.
var managedRuleGroups = []string{"AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet"}

// addWAF puts an AWS WAF web ACL with the managed rule groups in front of
// the load balancer. SizeRestrictions_BODY (a body over 8 KB) only counts:
// resource specs and providers' task results legitimately exceed 8 KB, and
// converge bounds request bodies itself.
func addWAF(stack awscdk.Stack, alb elbv2.ApplicationLoadBalancer) awswafv2.CfnWebACL {
	visibility := func(name string) *awswafv2.CfnWebACL_VisibilityConfigProperty {
		return &awswafv2.CfnWebACL_VisibilityConfigProperty{
			CloudWatchMetricsEnabled: jsii.Bool(true), SampledRequestsEnabled: jsii.Bool(true), MetricName: jsii.String(name),
		}
	}
	rules := []any{}
	for i, name := range managedRuleGroups {
		group := &awswafv2.CfnWebACL_ManagedRuleGroupStatementProperty{VendorName: jsii.String("AWS"), Name: jsii.String(name)}
		if name == "AWSManagedRulesCommonRuleSet" {
			group.RuleActionOverrides = []any{&awswafv2.CfnWebACL_RuleActionOverrideProperty{
				Name: jsii.String("SizeRestrictions_BODY"), ActionToUse: &awswafv2.CfnWebACL_RuleActionProperty{Count: map[string]any{}},
			}}
		}
		rules = append(rules, &awswafv2.CfnWebACL_RuleProperty{
			Name: jsii.String(name), Priority: jsii.Number(float64(i)),
			Statement:        &awswafv2.CfnWebACL_StatementProperty{ManagedRuleGroupStatement: group},
			OverrideAction:   &awswafv2.CfnWebACL_OverrideActionProperty{None: map[string]any{}},
			VisibilityConfig: visibility(name),
		})
	}
	acl := awswafv2.NewCfnWebACL(stack, jsii.String("WebAcl"), &awswafv2.CfnWebACLProps{
		Scope:            jsii.String("REGIONAL"),
		DefaultAction:    &awswafv2.CfnWebACL_DefaultActionProperty{Allow: map[string]any{}},
		VisibilityConfig: visibility("converge"),
		Rules:            rules,
	})
	awswafv2.NewCfnWebACLAssociation(stack, jsii.String("WebAclAssociation"), &awswafv2.CfnWebACLAssociationProps{
		ResourceArn: alb.LoadBalancerArn(), WebAclArn: acl.AttrArn(),
	})
	return acl
}
