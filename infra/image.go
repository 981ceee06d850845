package main

import (
	"regexp"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecr"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/jsii-runtime-go"
)

// ecrImage matches an ECR image URI: account, region, the .cn suffix of the
// China partition, and the repository, then a tag or a digest.
var ecrImage = regexp.MustCompile(`^([0-9]{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/([a-z0-9][a-z0-9._/-]*)(:[\w][\w.-]*|@sha256:[0-9a-f]{64})$`)

// containerImage is the converge image at uri, and its ECR repository when
// uri is an ECR one (the task execution roles pull from it; nil otherwise,
// e.g. a public registry).
func containerImage(stack awscdk.Stack, uri string) (awsecs.ContainerImage, awsecr.IRepository) {
	image := awsecs.ContainerImage_FromRegistry(jsii.String(uri), nil)
	m := ecrImage.FindStringSubmatch(uri)
	if m == nil {
		return image, nil
	}
	partition := "aws"
	if m[3] != "" {
		partition = "aws-cn"
	}
	repo := awsecr.Repository_FromRepositoryAttributes(stack, jsii.String("ImageRepository"), &awsecr.RepositoryAttributes{
		RepositoryArn:  jsii.String("arn:" + partition + ":ecr:" + m[2] + ":" + m[1] + ":repository/" + m[4]),
		RepositoryName: jsii.String(m[4]),
	})
	return image, repo
}
