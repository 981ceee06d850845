variable "n" {
  type    = number
  default = 0
}

resource "terraform_data" "x" {
  input = var.n

  lifecycle {
    precondition {
      condition     = var.n > 0
      error_message = "n must be positive."
    }
  }
}
