# A module pinning a Terraform version range: latest-allowed picks the newest installed
# version it permits.
terraform {
  required_version = ">= 1.5, < 1.12.0"
}

resource "terraform_data" "x" {
  input = "versioned"
}
