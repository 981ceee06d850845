# The app's network, simulated with Terraform's built-in terraform_data: no provider to
# download, no cloud. Its id flows, through the stdcel graph, into the services and the
# cache.
variable "name" {
  type = string
}

variable "cidr" {
  type = string
}

resource "terraform_data" "network" {
  input = {
    name = var.name
    cidr = var.cidr
  }
}

output "network_id" {
  value = "net-${substr(terraform_data.network.id, 0, 8)}"
}

output "cidr" {
  value = var.cidr
}
