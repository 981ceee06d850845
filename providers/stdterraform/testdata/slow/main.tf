# An apply that runs until it is stopped. Its program runs in the background, where
# it ignores SIGINT, so only a kill of the whole process group stops it; its pid goes
# to var.pidfile.
variable "pidfile" {
  type = string
}

resource "terraform_data" "x" {
  input = var.pidfile

  provisioner "local-exec" {
    command = "sleep 60 & echo $! > ${var.pidfile}; wait"
  }
}
