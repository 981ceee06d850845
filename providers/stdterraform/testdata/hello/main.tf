# Built-in resources only: terraform_data and local-exec need no provider download.
variable "name" {
  type = string
}

variable "marker" {
  type        = string
  default     = "/dev/null"
  description = "A file the destroy writes, so a test can see it ran."
}

resource "terraform_data" "greeting" {
  input = "hello ${var.name}"
}

resource "terraform_data" "marker" {
  input = var.marker

  provisioner "local-exec" {
    when    = destroy
    command = "echo destroyed > ${self.input}"
  }
}

output "greeting" {
  value = terraform_data.greeting.output
}

output "id" {
  value = terraform_data.greeting.id
}

output "secret" {
  value     = "s3cr3t"
  sensitive = true
}
