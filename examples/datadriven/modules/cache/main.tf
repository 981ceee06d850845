# A cache in the app's network, simulated with terraform_data like the network.
variable "name" {
  type = string
}

variable "network_id" {
  type = string
}

resource "terraform_data" "cache" {
  input = {
    name    = var.name
    network = var.network_id
  }
}

output "endpoint" {
  value = "${var.name}.${var.network_id}.internal:6379"
}
