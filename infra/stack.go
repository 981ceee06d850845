package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	elbv2 "github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Config is what the stack reads from CDK context (cdk.json or -c key=value).
type Config struct {
	// ImageURI is the converge image both services run (make image, pushed
	// to a registry): an ECR URI with a tag or digest, or any registry's.
	ImageURI string
	// CertificateArn is the ACM certificate of the HTTPS listener; without
	// it, a hosted zone must be given and the stack issues one.
	CertificateArn string
	// DomainName is the name that certificate covers, pointed (CNAME/alias)
	// at the load balancer: providers call back to https://DomainName.
	DomainName string
	// HostedZoneID and HostedZoneName name a Route 53 public zone holding
	// DomainName: the stack then writes the alias record to the load
	// balancer and, without CertificateArn, a DNS-validated certificate.
	HostedZoneID, HostedZoneName string
	// ProviderZip is the quickstart provider's Lambda package (make functions).
	ProviderZip string
	// PlaceholderProvider deploys a stand-in function when ProviderZip is
	// absent, so the stack synthesizes before `make functions` ran.
	PlaceholderProvider bool
	// CloudWatchAgentImage scrapes the dispatcher's /metrics into CloudWatch.
	CloudWatchAgentImage string
	// DeletionProtection guards the database against `cdk destroy`.
	DeletionProtection bool
	// VPCEndpoints adds the VPC endpoints (addEndpoints); without them
	// the tasks reach the same AWS APIs through the internet gateway.
	VPCEndpoints bool
	// ReaderCount is the number of Aurora readers beside the writer.
	ReaderCount int
	// BackupRetentionDays (1 to 35) and BackupWindow (hh:mm-hh:mm UTC, at
	// least 30 minutes) are the database's automated backups.
	BackupRetentionDays int
	BackupWindow        string
	// AccessLogRetentionDays is how long the load balancer's access logs are kept.
	AccessLogRetentionDays int
	// Control and Dispatch bound each service's autoscaling.
	Control, Dispatch TaskRange
	// QueueScaleOutDepth is the number of queued tasks above which the
	// dispatcher scales out (twice and four times it, faster).
	QueueScaleOutDepth float64
	// Alarm thresholds: failed deliveries per 5 minutes, and queued tasks.
	FailedDeliveriesThreshold, QueueDepthThreshold float64
}

// TaskRange is the least and the most tasks autoscaling keeps a service at.
type TaskRange struct{ Min, Max int }

// validate reports the first setting the stack cannot be built from.
func (c Config) validate() error {
	switch {
	case c.ImageURI == "":
		return fmt.Errorf("context imageUri is required: the converge image the services run (make image, then push it to ECR)")
	case strings.Contains(c.ImageURI, ".dkr.ecr.") && !ecrImage.MatchString(c.ImageURI):
		return fmt.Errorf("context imageUri %s: want ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY:TAG or @sha256:DIGEST", c.ImageURI)
	case c.DomainName == "":
		return fmt.Errorf("context domainName is required: the name providers call back to and the certificate covers")
	case (c.HostedZoneID == "") != (c.HostedZoneName == ""):
		return fmt.Errorf("context hostedZoneId and hostedZoneName go together")
	case c.CertificateArn == "" && c.HostedZoneID == "":
		return fmt.Errorf("context certificateArn, or hostedZoneId and hostedZoneName (to issue one), is required for the HTTPS listener")
	case c.HostedZoneName != "" && c.DomainName != c.HostedZoneName && !strings.HasSuffix(c.DomainName, "."+c.HostedZoneName):
		return fmt.Errorf("context domainName %s is not in hosted zone %s", c.DomainName, c.HostedZoneName)
	case c.BackupRetentionDays < 1 || c.BackupRetentionDays > 35:
		return fmt.Errorf("context backupRetentionDays: want 1 to 35, got %d", c.BackupRetentionDays)
	case c.AccessLogRetentionDays < 1:
		return fmt.Errorf("context accessLogRetentionDays: want at least 1")
	case c.Control.Min < 1 || c.Control.Max < c.Control.Min:
		return fmt.Errorf("context controlMinTasks/controlMaxTasks: want 1 <= min <= max, got %d and %d", c.Control.Min, c.Control.Max)
	case c.Dispatch.Min < 1 || c.Dispatch.Max < c.Dispatch.Min:
		return fmt.Errorf("context dispatchMinTasks/dispatchMaxTasks: want 1 <= min <= max, got %d and %d", c.Dispatch.Min, c.Dispatch.Max)
	case c.QueueScaleOutDepth <= 0:
		return fmt.Errorf("context queueScaleOutDepth: want a positive number")
	}
	return nil
}

// The ports converge listens on (LISTEN_ADDR, HEALTH_ADDR).
const (
	apiPort    = 8080
	healthPort = 8081
	dbUser     = "converge"
	// The drain budget a stopping task gets (SHUTDOWN_TIMEOUT), and what
	// ECS waits beyond it before SIGKILL (StopTimeout = the sum, at most 120 s).
	shutdownTimeout = 30 * time.Second
	stopMargin      = 15 * time.Second
	dbName          = "converge"
	// The CloudWatch namespace and scrape job of the dispatcher's metrics.
	metricsNamespace = "Converge"
	metricsJob       = "converge-dispatch"
	// Delivery results that mean the provider did not take the task (the
	// results of converge_dispatch_deliveries_total, dispatch/metrics.go,
	// less ok, accepted, task_error and cancelled).
	failedResults = "rate_limited|gone|redirect|client_error|server_error|retryable|unexpected|malformed|too_large|timeout|deadline|network|blocked"
)

// NewConvergeStack builds the whole deployment: network, database, the two
// converge roles behind an HTTPS load balancer, the Lambda-hosted quickstart
// provider, keys and alarms.
func NewConvergeStack(scope constructs.Construct, id string, cfg Config, props *awscdk.StackProps) (awscdk.Stack, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	code, err := providerCode(cfg)
	if err != nil {
		return nil, err
	}
	stack := awscdk.NewStack(scope, jsii.String(id), props)

	// Public subnets for the load balancer and the tasks, isolated ones for the
	// database, and no NAT gateway: the dispatcher must reach providers on the
	// internet anyway, so the tasks get public IPs and a security group that
	// only admits the load balancer. The VPC endpoints (addEndpoints) keep
	// the tasks' AWS API calls, the image pull and the logs inside the VPC;
	// only calls to providers and Lambda Function URLs leave through the
	// internet gateway.
	vpc := awsec2.NewVpc(stack, jsii.String("Vpc"), &awsec2.VpcProps{
		MaxAzs:      jsii.Number(2),
		NatGateways: jsii.Number(0),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24)},
			{Name: jsii.String("db"), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
		},
	})
	vpc.AddFlowLog(jsii.String("FlowLog"), &awsec2.FlowLogOptions{
		Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(awslogs.NewLogGroup(stack, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		}), nil),
		TrafficType: awsec2.FlowLogTrafficType_ALL,
	})

	// One customer-managed key for every secret and the database storage.
	key := awskms.NewKey(stack, jsii.String("Key"), &awskms.KeyProps{
		Description:       jsii.String("Converge: secrets and database storage"),
		EnableKeyRotation: jsii.Bool(true),
	})
	// Written once by the bootstrap function below (converge wants base64 of
	// exact byte counts, which GenerateSecretString cannot produce).
	secretKey := awssecretsmanager.NewSecret(stack, jsii.String("SecretKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("CONVERGE_SECRET_KEY: base64 of 32 bytes, encrypts endpoint signing secrets at rest"), EncryptionKey: key,
	})
	callbackKey := awssecretsmanager.NewSecret(stack, jsii.String("CallbackKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("CONVERGE_CALLBACK_KEY: base64 of 48 bytes, signs callback tokens"), EncryptionKey: key,
	})
	// {"token": the read token the metrics scraper uses, "prometheus": its scrape config}.
	metricsSecret := awssecretsmanager.NewSecret(stack, jsii.String("MetricsScrape"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Read token and scrape config of the dispatcher's /metrics"), EncryptionKey: key,
	})
	adminToken := awssecretsmanager.NewSecret(stack, jsii.String("AdminToken"), &awssecretsmanager.SecretProps{
		Description:   jsii.String("CONVERGE_ADMIN_TOKENS: the API's admin bearer token (conctl)"),
		EncryptionKey: key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength: jsii.Number(48), ExcludePunctuation: jsii.Bool(true), IncludeSpace: jsii.Bool(false),
		},
	})
	// 64 characters of [A-Za-z0-9] are the standard base64 of 48 bytes: with
	// the whsec_ prefix, a valid Converge endpoint secret.
	signingSecret := awssecretsmanager.NewSecret(stack, jsii.String("ProviderSigningSecret"), &awssecretsmanager.SecretProps{
		Description:   jsii.String("The quickstart provider endpoint's signing secret (base64 part of whsec_...)"),
		EncryptionKey: key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength: jsii.Number(64), ExcludePunctuation: jsii.Bool(true), IncludeSpace: jsii.Bool(false),
		},
	})
	suppress(metricsSecret, "AwsSolutions-SMG4", "The read token (CONVERGE_READ_TOKENS) and the scrape configuration embedding it: ECS injects both into the tasks at start, so a scheduled rotation would leave running tasks and the agent on the old token until a redeploy. Operators rotate it with put-secret-value and a forced new deployment.")
	suppress(adminToken, "AwsSolutions-SMG4", "The operators' admin bearer token (conctl), injected by ECS at task start: an unattended rotation would change it under operators without reaching running tasks. Operators rotate it with put-secret-value and a forced new deployment.")
	suppress(signingSecret, "AwsSolutions-SMG4", "The quickstart provider endpoint's signing secret, whose authoritative copy converge keeps in its database: it changes through POST /api/v1/endpoints/{name}/rotate-secret (the old secret stays valid 24 h) and then the function's PROVIDER_SECRETS, an order a Secrets Manager rotation function cannot drive.")

	// Aurora PostgreSQL Serverless v2. 0.5 ACU is the floor that matters:
	// every converge process heartbeats every 10 s, so the cluster never
	// idles long enough to pause at 0.
	// The readers serve the API's GET routes (DATABASE_READ_URL). The first
	// scales with the writer: it is the failover target, so it must be able
	// to carry the writer's load the moment it is promoted.
	readers := []awsrds.IClusterInstance{}
	for i := range cfg.ReaderCount {
		readers = append(readers, awsrds.ClusterInstance_ServerlessV2(jsii.String(fmt.Sprintf("reader%d", i+1)), &awsrds.ServerlessV2ClusterInstanceProps{
			ScaleWithWriter: jsii.Bool(i == 0),
		}))
	}
	db := awsrds.NewDatabaseCluster(stack, jsii.String("Db"), &awsrds.DatabaseClusterProps{
		Engine: awsrds.DatabaseClusterEngine_AuroraPostgres(&awsrds.AuroraPostgresClusterEngineProps{
			Version: awsrds.AuroraPostgresEngineVersion_VER_17_5(),
		}),
		Writer:  awsrds.ClusterInstance_ServerlessV2(jsii.String("writer"), nil),
		Readers: &readers,
		Backup: &awsrds.BackupProps{
			Retention:       awscdk.Duration_Days(jsii.Number(float64(cfg.BackupRetentionDays))),
			PreferredWindow: jsii.String(cfg.BackupWindow),
		},
		ServerlessV2MinCapacity: jsii.Number(0.5),
		ServerlessV2MaxCapacity: jsii.Number(4),
		Vpc:                     vpc,
		VpcSubnets:              &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED},
		IamAuthentication:       jsii.Bool(true),
		// The bootstrap creates the IAM-authenticated user through the Data
		// API, so it needs no network path into the isolated subnets.
		EnableDataApi:        jsii.Bool(true),
		DefaultDatabaseName:  jsii.String(dbName),
		Credentials:          awsrds.Credentials_FromGeneratedSecret(jsii.String("postgres"), nil),
		StorageEncrypted:     jsii.Bool(true),
		StorageEncryptionKey: key,
		DeletionProtection:   jsii.Bool(cfg.DeletionProtection),
		RemovalPolicy:        awscdk.RemovalPolicy_SNAPSHOT,
	})

	suppress(db.Node().FindChild(jsii.String("Secret")), "AwsSolutions-SMG4", "The master user's password is used once, by the bootstrap through the Data API, to create the IAM-authenticated converge role; converge itself never uses a password (DB_IAM_AUTH). Rotation would add a rotation function inside the isolated database subnets for a credential otherwise unused.")
	bootstrap := newBootstrap(stack, db, secretKey, callbackKey, metricsSecret)
	if err := addKeyRotation(stack, cfg, key, secretKey, callbackKey, bootstrap); err != nil {
		return nil, err
	}

	// The quickstart provider on Lambda, behind an AWS_IAM Function URL.
	providerLogs := awslogs.NewLogGroup(stack, jsii.String("ProviderLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	providerRole := lambdaRole(stack, "ProviderRole", providerLogs)
	provider := awslambda.NewFunction(stack, jsii.String("QuickstartProvider"), &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         code,
		MemorySize:   jsii.Number(128),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(30)),
		Role:         providerRole,
		LogGroup:     providerLogs,
		Environment: &map[string]*string{
			// A dynamic reference: CloudFormation resolves it at deploy time.
			"PROVIDER_SECRETS": jsii.String("whsec_" + *signingSecret.SecretValue().UnsafeUnwrap()),
		},
	})
	providerURL := provider.AddFunctionUrl(&awslambda.FunctionUrlOptions{AuthType: awslambda.FunctionUrlAuthType_AWS_IAM})

	// The converge image (linux/arm64) and the ECS cluster both roles run on (Graviton).
	image, imageRepo := containerImage(stack, cfg.ImageURI)
	cluster := awsecs.NewCluster(stack, jsii.String("Cluster"), &awsecs.ClusterProps{
		Vpc: vpc, ContainerInsightsV2: awsecs.ContainerInsights_ENABLED,
	})
	albSG := awsec2.NewSecurityGroup(stack, jsii.String("AlbSg"), &awsec2.SecurityGroupProps{
		Vpc: vpc, AllowAllOutbound: jsii.Bool(false), Description: jsii.String("Converge load balancer"),
	})
	albSG.AddIngressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(443)), jsii.String("HTTPS"), nil)
	suppress(albSG, "AwsSolutions-EC23", "The load balancer is the public API and the callback address of providers anywhere on the internet: HTTPS from any IPv4 address is its purpose. AWS WAF filters it (addWAF).")
	alb := elbv2.NewApplicationLoadBalancer(stack, jsii.String("Alb"), &elbv2.ApplicationLoadBalancerProps{
		Vpc: vpc, InternetFacing: jsii.Bool(true), SecurityGroup: albSG,
		VpcSubnets:              &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC},
		DropInvalidHeaderFields: jsii.Bool(true),
	})
	logAccess(stack, cfg, alb)
	addWAF(stack, alb)
	callbackBase := "https://" + cfg.DomainName
	dbURL := func(e awsrds.Endpoint) *string {
		return awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("postgres://" + dbUser + "@"), e.Hostname(),
			jsii.String(":"), awscdk.Token_AsString(e.Port(), nil),
			jsii.String("/" + dbName + "?sslmode=verify-full&sslrootcert=/etc/ssl/certs/rds-global-bundle.pem"),
		})
	}

	type role struct {
		name, role      string
		cpu, mem        float64
		keys            []awssecretsmanager.Secret
		scrapeMetrics   bool
		healthCheckPort int
		// readsFromReaders: the API's GET routes go to the Aurora readers.
		readsFromReaders bool
	}
	services := map[string]awsecs.FargateService{}
	for _, r := range []role{
		{name: "Control", role: "control", cpu: 256, mem: 512, keys: []awssecretsmanager.Secret{secretKey}, healthCheckPort: apiPort, readsFromReaders: true},
		{name: "Dispatch", role: "dispatch", cpu: 256, mem: 1024, keys: []awssecretsmanager.Secret{secretKey, callbackKey}, scrapeMetrics: true, healthCheckPort: healthPort},
	} {
		logs := awslogs.NewLogGroup(stack, jsii.String(r.name+"Logs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		td := awsecs.NewFargateTaskDefinition(stack, jsii.String(r.name+"Task"), &awsecs.FargateTaskDefinitionProps{
			Cpu: jsii.Number(r.cpu), MemoryLimitMiB: jsii.Number(r.mem),
			RuntimePlatform: &awsecs.RuntimePlatform{
				CpuArchitecture: awsecs.CpuArchitecture_ARM64(), OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
			},
		})
		env := map[string]*string{
			"ROLE":              jsii.String(r.role),
			"DATABASE_URL":      dbURL(db.ClusterEndpoint()),
			"DB_IAM_AUTH":       jsii.String("true"),
			"AWS_REGION":        stack.Region(),
			"LISTEN_ADDR":       jsii.String(fmt.Sprintf(":%d", apiPort)),
			"HEALTH_ADDR":       jsii.String(fmt.Sprintf(":%d", healthPort)),
			"LOG_FORMAT":        jsii.String("json"),
			"CALLBACK_BASE_URL": jsii.String(callbackBase),
			"SHUTDOWN_TIMEOUT":  jsii.String(shutdownTimeout.String()),
		}
		if r.readsFromReaders {
			// The API's GET routes; DB_IAM_AUTH applies to this pool too.
			env["DATABASE_READ_URL"] = dbURL(db.ClusterReadEndpoint())
		}
		if r.role == "dispatch" && cfg.VPCEndpoints {
			env["DISPATCH_ALLOW_CIDRS"] = jsii.String(endpointCIDRs(vpc))
		}
		for _, k := range r.keys {
			name := "CONVERGE_SECRET_KEY_SECRET_ARN"
			if k == callbackKey {
				name = "CONVERGE_CALLBACK_KEY_SECRET_ARN"
			}
			env[name] = k.SecretArn()
			k.GrantRead(td.TaskRole(), nil)
		}
		db.GrantConnect(td.TaskRole(), jsii.String(dbUser))
		if imageRepo != nil {
			imageRepo.GrantPull(td.ObtainExecutionRole())
			// GrantPull wrote the role's default policy.
			suppress(td.ObtainExecutionRole().Node().FindChild(jsii.String("DefaultPolicy")), "AwsSolutions-IAM5", "ecr:GetAuthorizationToken has no resource type: ECR only authorizes it on \"*\". The pull itself is scoped to the image's repository.", "Resource::*")
		}
		suppress(td, "AwsSolutions-ECS2", "The environment holds configuration only (role, ports, database URLs without credentials, log format, callback URL, secret ARNs); every secret comes from Secrets Manager through ECS secrets or the task role.")
		td.AddContainer(jsii.String("converge"), &awsecs.ContainerDefinitionOptions{
			Image:     image,
			Essential: jsii.Bool(true),
			// ECS kills the container StopTimeout after SIGTERM (30 s by
			// default, SHUTDOWN_TIMEOUT's own default): a dispatcher killed
			// mid-drain leaves its claims to the 60 s lease instead of
			// releasing them, so the shutdown gets its budget plus a margin.
			StopTimeout: awscdk.Duration_Seconds(jsii.Number(shutdownTimeout.Seconds() + stopMargin.Seconds())),
			Environment: &env,
			// ECS injects the API tokens; converge reads them from its environment.
			Secrets: &map[string]awsecs.Secret{
				"CONVERGE_ADMIN_TOKENS": awsecs.Secret_FromSecretsManager(adminToken, nil),
				"CONVERGE_READ_TOKENS":  awsecs.Secret_FromSecretsManager(metricsSecret, jsii.String("token")),
			},
			PortMappings: &[]*awsecs.PortMapping{{ContainerPort: jsii.Number(apiPort)}, {ContainerPort: jsii.Number(healthPort)}},
			Logging:      awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{StreamPrefix: jsii.String(r.role), LogGroup: logs}),
		})
		if r.scrapeMetrics {
			addMetricsAgent(stack, td, cfg.CloudWatchAgentImage, metricsSecret, logs)
		}
		sg := awsec2.NewSecurityGroup(stack, jsii.String(r.name+"Sg"), &awsec2.SecurityGroupProps{
			Vpc: vpc, Description: jsii.String("Converge " + r.role + " tasks"),
		})
		// No DesiredCount: autoscaling owns it (addScaling), and a deploy
		// must not reset a scaled-out service to a fixed count.
		svc := awsecs.NewFargateService(stack, jsii.String(r.name), &awsecs.FargateServiceProps{
			Cluster: cluster, TaskDefinition: td,
			AssignPublicIp: jsii.Bool(true), SecurityGroups: &[]awsec2.ISecurityGroup{sg},
			VpcSubnets:        &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC},
			CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
			MinHealthyPercent: jsii.Number(100),
		})
		svc.Node().AddDependency(bootstrap)
		db.Connections().AllowDefaultPortFrom(svc, jsii.String("converge "+r.role))
		svc.Connections().AllowFrom(alb, awsec2.Port_Tcp(jsii.Number(apiPort)), jsii.String("load balancer"))
		svc.Connections().AllowFrom(alb, awsec2.Port_Tcp(jsii.Number(float64(r.healthCheckPort))), jsii.String("load balancer health checks"))
		services[r.name] = svc
	}

	// The dispatcher invokes the provider with its task role: exactly the
	// two invoke actions, on that function only.
	services["Dispatch"].TaskDefinition().TaskRole().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("lambda:InvokeFunction", "lambda:InvokeFunctionUrl"),
		Resources: jsii.Strings(*provider.FunctionArn()),
	}))

	// The API goes to control; the callback routes (/v1/tasks/…) to dispatch.
	listener := alb.AddListener(jsii.String("Https"), &elbv2.BaseApplicationListenerProps{
		Port:         jsii.Number(443),
		Protocol:     elbv2.ApplicationProtocol_HTTPS,
		SslPolicy:    elbv2.SslPolicy_RECOMMENDED_TLS,
		Certificates: &[]elbv2.IListenerCertificate{elbv2.ListenerCertificate_FromCertificateManager(certificate(stack, cfg, alb))},
		Open:         jsii.Bool(false),
	})
	// A task leaving the load balancer gets 30 s (not the default 300) for
	// the requests it is answering: API calls and callbacks are short, and
	// ECS only sends SIGTERM once the deregistration is over.
	deregistrationDelay := awscdk.Duration_Seconds(jsii.Number(30))
	controlTargets := listener.AddTargets(jsii.String("Control"), &elbv2.AddApplicationTargetsProps{
		Port: jsii.Number(apiPort), Protocol: elbv2.ApplicationProtocol_HTTP,
		Targets: &[]elbv2.IApplicationLoadBalancerTarget{services["Control"]},
		// /livez never touches the database: a Postgres blip must not drain every task.
		HealthCheck:         &elbv2.HealthCheck{Path: jsii.String("/livez")},
		DeregistrationDelay: deregistrationDelay,
	})
	listener.AddTargets(jsii.String("Dispatch"), &elbv2.AddApplicationTargetsProps{
		Priority:   jsii.Number(10),
		Conditions: &[]elbv2.ListenerCondition{elbv2.ListenerCondition_PathPatterns(jsii.Strings("/v1/tasks/*"))},
		Port:       jsii.Number(apiPort), Protocol: elbv2.ApplicationProtocol_HTTP,
		Targets: &[]elbv2.IApplicationLoadBalancerTarget{services["Dispatch"].LoadBalancerTarget(&awsecs.LoadBalancerTargetOptions{
			ContainerName: jsii.String("converge"), ContainerPort: jsii.Number(apiPort),
		})},
		HealthCheck:         &elbv2.HealthCheck{Path: jsii.String("/livez"), Port: jsii.String(fmt.Sprint(healthPort))},
		DeregistrationDelay: deregistrationDelay,
	})

	addScaling(cfg, services["Control"], services["Dispatch"], controlTargets)
	if cfg.VPCEndpoints {
		addEndpoints(stack, vpc, services["Control"], services["Dispatch"])
	}
	addAlarms(stack, cfg, key)

	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("LoadBalancerDns", "Point "+cfg.DomainName+" (CNAME or alias) here", alb.LoadBalancerDnsName())
	out("ApiUrl", "conctl --server", jsii.String(callbackBase))
	out("AdminTokenSecretArn", "The API's admin token (conctl --token)", adminToken.SecretArn())
	out("ProviderFunctionArn", "target.function of a lambda endpoint", provider.FunctionArn())
	out("ProviderFunctionUrl", "target.url of a lambda_url endpoint", providerURL.Url())
	out("ProviderSigningSecretArn", "The endpoint's secret is whsec_ + this secret's value", signingSecret.SecretArn())
	out("DbClusterEndpoint", "Aurora writer endpoint", db.ClusterEndpoint().Hostname())
	out("DbReaderEndpoint", "Aurora reader endpoint (the API's GET routes)", db.ClusterReadEndpoint().Hostname())
	return stack, nil
}

// providerCode is the quickstart provider's package, or a stand-in when the
// zip has not been built and the caller allowed that.
func providerCode(cfg Config) (awslambda.Code, error) {
	if _, err := os.Stat(cfg.ProviderZip); err == nil {
		return awslambda.Code_FromAsset(jsii.String(cfg.ProviderZip), nil), nil
	} else if !cfg.PlaceholderProvider {
		return nil, fmt.Errorf("provider package %s: %w (run `make functions`, or pass -c placeholderProvider=true to synthesize with a stand-in)", cfg.ProviderZip, err)
	}
	// No bootstrap in it: deployed, it fails every invocation, hence opt-in.
	return awslambda.Code_FromAsset(jsii.String("placeholder-provider"), nil), nil
}

// lambdaRole is a function's execution role, allowed to write its own log
// group and nothing else (the managed AWSLambdaBasicExecutionRole would
// allow every log group).
func lambdaRole(stack awscdk.Stack, id string, logs awslogs.LogGroup) awsiam.Role {
	role := awsiam.NewRole(stack, jsii.String(id), &awsiam.RoleProps{
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
	})
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: jsii.Strings(*logs.LogGroupArn()),
	}))
	return role
}

// bootstrapCode runs once, at stack creation: it writes the keys converge
// needs in the exact encodings it validates, the metrics scraper's token and
// config, and creates the database user that logs in with IAM (the Data API
// runs the SQL as the master user). Updates and deletes change nothing.
const bootstrapCode = `import base64, json, os, secrets
import boto3, cfnresponse

SQL = """DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'converge') THEN CREATE ROLE converge LOGIN; END IF;
  GRANT rds_iam TO converge;
  GRANT converge TO CURRENT_USER;
  ALTER DATABASE converge OWNER TO converge;
END $$"""

def handler(event, context):
    try:
        if event["RequestType"] == "Create":
            p = event["ResourceProperties"]
            sm = boto3.client("secretsmanager")
            sm.put_secret_value(SecretId=p["SecretKeyArn"], SecretString=base64.b64encode(os.urandom(32)).decode())
            sm.put_secret_value(SecretId=p["CallbackKeyArn"], SecretString=base64.b64encode(os.urandom(48)).decode())
            token = secrets.token_urlsafe(32)
            sm.put_secret_value(SecretId=p["MetricsArn"], SecretString=json.dumps(
                {"token": token, "prometheus": p["ScrapeConfig"].replace("TOKEN", token)}))
            boto3.client("rds-data").execute_statement(
                resourceArn=p["ClusterArn"], secretArn=p["MasterSecretArn"], database="converge", sql=SQL)
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "bootstrap")
    except Exception as e:
        print(repr(e))
        cfnresponse.send(event, context, cfnresponse.FAILED, {}, "bootstrap")
`

// scrapeConfig is the Prometheus scrape configuration of the metrics agent
// (TOKEN is replaced by the generated read token: /metrics needs one).
var scrapeConfig = fmt.Sprintf(`global:
  scrape_interval: 1m
  scrape_timeout: 10s
scrape_configs:
  - job_name: %s
    authorization:
      credentials: TOKEN
    static_configs:
      - targets: ["localhost:%d"]
`, metricsJob, apiPort)

func newBootstrap(stack awscdk.Stack, db awsrds.DatabaseCluster, secretKey, callbackKey, metrics awssecretsmanager.Secret) awscdk.CustomResource {
	logs := awslogs.NewLogGroup(stack, jsii.String("BootstrapLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := lambdaRole(stack, "BootstrapRole", logs)
	for _, s := range []awssecretsmanager.Secret{secretKey, callbackKey, metrics} {
		s.GrantWrite(role)
	}
	db.Secret().GrantRead(role, nil)
	db.GrantDataApiAccess(role)
	fn := awslambda.NewFunction(stack, jsii.String("Bootstrap"), &awslambda.FunctionProps{
		// python3.14, not the newest runtime the CDK lists (python3.15):
		// cfn-lint's CloudFormation schema (make infra-synth) rejects 3.15.
		Runtime:  awslambda.Runtime_PYTHON_3_14(),
		Handler:  jsii.String("index.handler"),
		Code:     awslambda.Code_FromInline(jsii.String(bootstrapCode)),
		Timeout:  awscdk.Duration_Minutes(jsii.Number(2)),
		Role:     role,
		LogGroup: logs,
	})
	suppress(fn, "AwsSolutions-L1", "python3.14 is a supported Lambda runtime; python3.15, the newest the CDK lists, is not yet in the CloudFormation resource schema cfn-lint validates against in CI (make infra-synth).")
	cr := awscdk.NewCustomResource(stack, jsii.String("BootstrapRun"), &awscdk.CustomResourceProps{
		ServiceToken: fn.FunctionArn(),
		Properties: &map[string]any{
			"SecretKeyArn":    secretKey.SecretArn(),
			"CallbackKeyArn":  callbackKey.SecretArn(),
			"MetricsArn":      metrics.SecretArn(),
			"ScrapeConfig":    scrapeConfig,
			"ClusterArn":      db.ClusterArn(),
			"MasterSecretArn": db.Secret().SecretArn(),
		},
	})
	// The writer must be up before the SQL runs.
	cr.Node().AddDependency(db)
	return cr
}

// addMetricsAgent runs the CloudWatch agent beside the dispatcher: it scrapes
// /metrics over the task's loopback and writes the two series the alarms need
// as embedded metric format (EMF) logs, which CloudWatch turns into metrics.
// Counters arrive as the delta since the previous scrape.
func addMetricsAgent(stack awscdk.Stack, td awsecs.FargateTaskDefinition, image string, metrics awssecretsmanager.Secret, logs awslogs.LogGroup) {
	emf := awslogs.NewLogGroup(stack, jsii.String("MetricsEmf"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_WEEK, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	td.TaskRole().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
		Resources: jsii.Strings(*emf.LogGroupArn()),
	}))
	agentCfg, err := json.Marshal(map[string]any{
		"agent": map[string]any{"debug": false},
		"logs": map[string]any{"metrics_collected": map[string]any{"prometheus": map[string]any{
			"log_group_name":         "LOG_GROUP",
			"prometheus_config_path": "env:PROMETHEUS_CONFIG_CONTENT",
			"emf_processor": map[string]any{
				"metric_namespace": metricsNamespace,
				"metric_declaration": []any{
					map[string]any{
						"source_labels":    []string{"job", "result"},
						"label_matcher":    "^" + metricsJob + ";(" + failedResults + ")$",
						"dimensions":       [][]string{{"job"}},
						"metric_selectors": []string{"^converge_dispatch_deliveries_total$"},
					},
					map[string]any{
						"source_labels":    []string{"job"},
						"label_matcher":    "^" + metricsJob + "$",
						"dimensions":       [][]string{{"job"}},
						"metric_selectors": []string{"^converge_dispatch_pending_tasks$"},
					},
				},
			},
		}}},
	})
	if err != nil {
		panic(err) // a literal map always marshals
	}
	td.AddContainer(jsii.String("cloudwatch-agent"), &awsecs.ContainerDefinitionOptions{
		Image:     awsecs.ContainerImage_FromRegistry(jsii.String(image), nil),
		Essential: jsii.Bool(false), // metrics lost, deliveries go on
		Environment: &map[string]*string{
			"CW_CONFIG_CONTENT": awscdk.Fn_Sub(jsii.String(strings.ReplaceAll(string(agentCfg), "LOG_GROUP", "${Emf}")),
				&map[string]*string{"Emf": emf.LogGroupName()}),
		},
		Secrets: &map[string]awsecs.Secret{
			"PROMETHEUS_CONFIG_CONTENT": awsecs.Secret_FromSecretsManager(metrics, jsii.String("prometheus")),
		},
		Logging: awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{StreamPrefix: jsii.String("cloudwatch-agent"), LogGroup: logs}),
	})
}

// addAlarms raises an alarm (to an SNS topic the operator subscribes to) on
// failed deliveries and on the queue's depth, from the agent's metrics.
// The topic is encrypted with the stack's key, which CloudWatch may use to
// publish to it, and refuses publishing without TLS.
func addAlarms(stack awscdk.Stack, cfg Config, key awskms.Key) {
	topic := awssns.NewTopic(stack, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("Converge alarms"), MasterKey: key, EnforceSSL: jsii.Bool(true),
	})
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey*"),
		Resources:  jsii.Strings("*"),
	}), nil)
	dims := &map[string]*string{"job": jsii.String(metricsJob)}
	failed := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(metricsNamespace), MetricName: jsii.String("converge_dispatch_deliveries_total"),
		DimensionsMap: dims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5)),
	})
	pending := pendingTasksMetric()
	for _, a := range []struct {
		id, desc  string
		metric    awscloudwatch.Metric
		threshold float64
		periods   float64
	}{
		{"FailedDeliveries", "Deliveries the providers did not take (5xx, timeouts, network, throttling…) in 5 minutes", failed, cfg.FailedDeliveriesThreshold, 1},
		{"QueueDepth", "Tasks waiting to be claimed, for 10 minutes running", pending, cfg.QueueDepthThreshold, 10},
	} {
		alarm := a.metric.CreateAlarm(stack, jsii.String(a.id+"Alarm"), &awscloudwatch.CreateAlarmOptions{
			AlarmDescription:   jsii.String(a.desc),
			Threshold:          jsii.Number(a.threshold),
			EvaluationPeriods:  jsii.Number(a.periods),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		alarm.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
	}
	awscdk.NewCfnOutput(stack, jsii.String("AlarmTopicArn"), &awscdk.CfnOutputProps{
		Value: topic.TopicArn(), Description: jsii.String("Subscribe to receive the alarms"),
	})
}
