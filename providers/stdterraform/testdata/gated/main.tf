# An apply that holds its state until the test lets it go: the provisioner marks
# <gate>/started (once per run: a second run appends) and waits for <gate>/open.
variable "gate" {
  type = string
}

resource "terraform_data" "x" {
  input = var.gate

  provisioner "local-exec" {
    command = "echo run >> ${var.gate}/started; while [ ! -e ${var.gate}/open ]; do sleep 0.1; done"
  }
}

output "gate" {
  value = terraform_data.x.output
}
